//! POSIX shared-memory segments (`shm_open` + `mmap`).
//!
//! Every segment of a job is named `/onesided.<job>.<owner>.<tag>` where `<job>` is a random
//! 128-bit job id, `<owner>` the creating rank (or `L` for the launcher) and `<tag>` 64 random
//! bits. Segments are created with `O_EXCL` and mode 0600, so nobody can pre-create or read
//! them, and their names are unguessable. Names are removed as soon as every process that
//! needs to open them has done so; the launcher sweeps the job prefix when the job ends, so
//! nothing stays in `/dev/shm` even when a rank is killed.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::Mode;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::shm;

use crate::error::{Error, Result};

/// Directory where Linux exposes POSIX shared-memory objects.
pub(crate) const SHM_DIR: &str = "/dev/shm";
/// Prefix of every segment name (without the leading slash).
pub(crate) const NAME_PREFIX: &str = "onesided.";

/// A mapped shared-memory segment.
#[derive(Debug)]
pub(crate) struct Segment {
    name: String,
    tag: u64,
    ptr: NonNull<u8>,
    len: usize,
    /// Created by this process: it removes the name when dropped (if still present).
    owner: bool,
    /// The name still exists in /dev/shm.
    linked: AtomicBool,
}

// SAFETY: a Segment is a mapping of shared memory; it carries no thread-affine state. All
// accesses to its contents go through raw pointers (copies) or atomics.
unsafe impl Send for Segment {}
// SAFETY: see above; `&Segment` only hands out the base pointer and length.
unsafe impl Sync for Segment {}

/// 64 random bits from the kernel.
pub(crate) fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // getrandom(2) only fails for invalid arguments or when interrupted; retry on EINTR.
    loop {
        match rustix::rand::getrandom(&mut buf, rustix::rand::GetRandomFlags::empty()) {
            Ok(_) => return u64::from_ne_bytes(buf),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => panic!("getrandom failed: {e}"),
        }
    }
}

/// A fresh random job id (32 hex digits).
pub(crate) fn random_job_id() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

/// Name of the segment with the given parts (with leading slash, as `shm_open` wants it).
pub(crate) fn segment_name(job: &str, owner: &str, tag: u64) -> String {
    format!("/{NAME_PREFIX}{job}.{owner}.{tag:016x}")
}

fn page_size() -> usize {
    rustix::param::page_size()
}

/// Mapped length for a requested length: at least one page, whole pages.
fn mapped_len(len: usize) -> Result<usize> {
    len.max(1)
        .checked_next_multiple_of(page_size())
        .filter(|&l| l <= isize::MAX as usize)
        .ok_or_else(|| no_room(len))
}

impl Segment {
    /// Creates (O_EXCL, mode 0600) and maps a new zero-filled segment of at least `len`
    /// bytes, with its space in /dev/shm reserved ([`Error::SharedMemoryFull`] otherwise).
    pub(crate) fn create(job: &str, owner: &str, len: usize) -> Result<Segment> {
        let map_len = mapped_len(len)?;
        for _ in 0..16 {
            let tag = random_u64();
            let name = segment_name(job, owner, tag);
            let fd = match shm::open(
                name.as_str(),
                shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
                Mode::RUSR | Mode::WUSR,
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => return Err(Error::os("shm_open", e)),
            };
            let mapped = reserve(&fd, map_len).and_then(|()| map(&fd, map_len));
            return match mapped {
                Ok(ptr) => Ok(Segment {
                    name,
                    tag,
                    ptr,
                    len: map_len,
                    owner: true,
                    linked: AtomicBool::new(true),
                }),
                Err(e) => {
                    let _ = shm::unlink(name.as_str());
                    Err(e)
                }
            };
        }
        Err(Error::Bootstrap(
            "could not find a free shared-memory name after 16 random tries".into(),
        ))
    }

    /// Opens and maps an existing segment by name (its whole length).
    pub(crate) fn open(name: &str) -> Result<Segment> {
        let fd = shm::open(name, shm::OFlags::RDWR, Mode::empty())
            .map_err(|e| Error::os("shm_open (open existing)", e))?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| Error::os("fstat", e))?;
        let len = usize::try_from(stat.st_size)
            .map_err(|_| Error::Bootstrap(format!("segment {name} has a negative size")))?;
        if len == 0 {
            return Err(Error::Bootstrap(format!("segment {name} is empty")));
        }
        let ptr = map(&fd, len)?;
        let tag = name
            .rsplit('.')
            .next()
            .and_then(|t| u64::from_str_radix(t, 16).ok())
            .unwrap_or(0);
        Ok(Segment {
            name: name.to_owned(),
            tag,
            ptr,
            len,
            owner: false,
            linked: AtomicBool::new(false),
        })
    }

    /// Base address of the mapping.
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Mapped length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The segment name (with leading slash).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The random tag that ends the name.
    pub(crate) fn tag(&self) -> u64 {
        self.tag
    }

    /// Removes the name from /dev/shm; the mapping stays valid. Idempotent.
    /// A new descriptor of the segment's object, while its name exists.
    pub(crate) fn reopen(&self) -> Result<rustix::fd::OwnedFd> {
        shm::open(self.name.as_str(), shm::OFlags::RDWR, Mode::empty())
            .map_err(|e| Error::os("shm_open (reopen)", e))
    }

    pub(crate) fn unlink(&self) {
        if self.owner && self.linked.swap(false, Ordering::AcqRel) {
            // ENOENT means the launcher swept it already: nothing left to do.
            let _ = shm::unlink(self.name.as_str());
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.unlink();
        // SAFETY: ptr/len describe a mapping created by `map` and not unmapped before; no
        // reference into it outlives the Segment (all users hold the Segment alive).
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Moves the pages `[addr, addr + len)` of this process into `seg` (a fresh segment of at
/// least `len` bytes, `addr` and `len` page aligned): their contents are written into its
/// object and the object is mapped over them at the same addresses, so that peers mapping
/// `seg` share them from then on. With `anonymous` (every page of the range is anonymous
/// memory or heap), pages the process never wrote — neither in memory nor swapped out:
/// they read as zero — are not written (the object's pages are zero too); a 1 GiB window
/// over memory the program has not touched yet moves nothing.
///
/// The contents go through `pwrite` rather than a copy between two mappings: a copy faults
/// in every page of both sides one at a time (most of a second per GiB here), the write
/// copies in the kernel. Nothing here allocates between reading the pages and mapping the
/// object over them: the range may hold the heap's own bookkeeping (a window over a small
/// `malloc` block shares its page), and a `malloc` or `free` of this thread in between
/// would write it after the copy — lost, and the heap corrupt.
///
/// # Safety
/// `[addr, addr + len)` is mapped private, readable and writable memory of this process,
/// and no other thread writes it while this runs (a write between the copy and the new
/// mapping would be lost).
pub(crate) unsafe fn share_pages(
    seg: &Segment,
    addr: *mut u8,
    len: usize,
    anonymous: bool,
) -> Result<rustix::fd::OwnedFd> {
    if len > seg.len || addr as usize % page_size() != 0 || len % page_size() != 0 {
        return Err(Error::InvalidArgument(
            "share_pages: unaligned range or small segment".into(),
        ));
    }
    let fd = shm::open(seg.name.as_str(), shm::OFlags::RDWR, Mode::empty())
        .map_err(|e| Error::os("shm_open (share in place)", e))?;
    let write = |offset: usize, n: usize| {
        // SAFETY: inside `[addr, addr + len)`, mapped and readable (caller's contract), and
        // no other thread writes it while this slice lives.
        let pages = unsafe { std::slice::from_raw_parts(addr.add(offset), n) };
        write_all_at(&fd, pages, offset as u64)
    };
    let scanned = if anonymous {
        written_pages(addr as usize, len, write)
    } else {
        None
    };
    match scanned {
        Some(written) => written?,
        // Every page, when the map cannot be read (or the memory is a file's copy).
        None => write(0, len)?,
    }
    // SAFETY: replaces the caller's pages (its contract) with the segment's object, which
    // now holds their contents; nothing else is mapped there.
    unsafe {
        rustix::mm::mmap(
            addr.cast(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED | MapFlags::FIXED,
            &fd,
            0,
        )
    }
    .map_err(|e| Error::os("mmap (share in place)", e))?;
    Ok(fd)
}

/// Undoes [`share_pages`]: the pages `[addr, addr + len)` become private anonymous memory
/// again, with the contents they have now. With `object` (the segment's descriptor and the
/// offset in it of `addr`), only the parts of the object that hold data are read back —
/// with `pread`, the rest of the new pages is zero as the object is there (holes: pages
/// nobody touched); without it every page is copied. As in [`share_pages`], nothing
/// allocates between the copy and the remap.
///
/// # Safety
/// As for [`share_pages`], on a range it shared (mapped from `object` at that offset when
/// given); no peer writes the segment any more.
pub(crate) unsafe fn unshare_pages(
    addr: *mut u8,
    len: usize,
    object: Option<(rustix::fd::BorrowedFd<'_>, u64)>,
) -> Result<()> {
    // SAFETY: a fresh private mapping at an address the kernel picks.
    let fresh = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .map_err(|e| Error::os("mmap (unshare)", e))?
    .cast::<u8>();
    let read_back = object.is_some_and(|(fd, at)| {
        data_extents(fd, at, len as u64, |offset, n| {
            // SAFETY: inside the fresh mapping (`data_extents` keeps to `len`), which
            // nothing else knows of.
            let pages = unsafe { std::slice::from_raw_parts_mut(fresh.add(offset), n) };
            read_exact_at(fd, pages, at + offset as u64)
        })
        .is_ok()
    });
    if !read_back {
        // SAFETY: both ranges are mapped, `len` long and distinct.
        unsafe { std::ptr::copy_nonoverlapping(addr, fresh, len) };
    }
    // SAFETY: moves the private copy over the shared pages in one step (the old mapping
    // there is replaced; the fresh one ceases to exist at its first address).
    unsafe {
        rustix::mm::mremap_fixed(
            fresh.cast(),
            len,
            len,
            rustix::mm::MremapFlags::MAYMOVE,
            addr.cast(),
        )
    }
    .map_err(|e| Error::os("mremap (unshare)", e))?;
    Ok(())
}

/// Calls `run(offset from addr, length)` for each run of pages of `[addr, addr + len)`
/// (page aligned) that holds something — present in memory or swapped out, by
/// `/proc/self/pagemap` — and stops at its first error. `None` when the map cannot be read
/// (before any call). Allocates nothing (see [`share_pages`]).
fn written_pages(
    addr: usize,
    len: usize,
    mut run: impl FnMut(usize, usize) -> Result<()>,
) -> Option<Result<()>> {
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    let page = page_size();
    let map = rustix::fs::open(
        "/proc/self/pagemap",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let (first, pages) = (addr / page, len / page);
    // Entries read at once (2 MiB of memory each time), on the stack.
    let mut entries = [0u64; 512];
    // (offset, length) of the run being gathered.
    let mut pending: Option<(usize, usize)> = None;
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(entries.len());
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut entries[..n]);
        if read_exact_at(
            rustix::fd::AsFd::as_fd(&map),
            bytes,
            (8 * (first + done)) as u64,
        )
        .is_err()
        {
            if done == 0 {
                return None;
            }
            // The rest of the map unreadable: the rest of the range is written whole.
            let rest = done * page;
            let flushed = pending.map_or(Ok(()), |(start, n)| run(start, n));
            return Some(flushed.and_then(|()| run(rest, len - rest)));
        }
        for (i, &entry) in entries[..n].iter().enumerate() {
            if entry & (PRESENT | SWAPPED) != 0 {
                pending = match pending {
                    Some((start, n)) => Some((start, n + page)),
                    None => Some(((done + i) * page, page)),
                };
            } else if let Some((start, n)) = pending.take() {
                if let Err(e) = run(start, n) {
                    return Some(Err(e));
                }
            }
        }
        done += n;
    }
    Some(pending.map_or(Ok(()), |(start, n)| run(start, n)))
}

/// Calls `extent(offset from at, length)` for each part of the object `fd` in
/// `[at, at + len)` that holds data (`SEEK_DATA`/`SEEK_HOLE`: on tmpfs, pages never written,
/// reserved ones included, are holes), and stops at the first error. Allocates nothing.
fn data_extents(
    fd: rustix::fd::BorrowedFd<'_>,
    at: u64,
    len: u64,
    mut extent: impl FnMut(usize, usize) -> Result<()>,
) -> Result<()> {
    use rustix::fs::{seek, SeekFrom};
    let end = at + len;
    let mut from = at;
    while from < end {
        let data = match seek(fd, SeekFrom::Data(from)) {
            Ok(data) => data,
            // No data after `from`.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(Error::os("lseek (SEEK_DATA)", e)),
        };
        if data >= end {
            break;
        }
        let hole = seek(fd, SeekFrom::Hole(data))
            .map_err(|e| Error::os("lseek (SEEK_HOLE)", e))?
            .min(end);
        // Both inside `[at, at + len)` with `len` a usize: they fit.
        extent((data - at) as usize, (hole - data) as usize)?;
        from = hole;
    }
    Ok(())
}

/// `pwrite` until all of `bytes` is written at `offset`.
fn write_all_at(fd: &rustix::fd::OwnedFd, mut bytes: &[u8], mut offset: u64) -> Result<()> {
    while !bytes.is_empty() {
        match rustix::io::pwrite(fd, bytes, offset) {
            Ok(0) => {
                return Err(Error::os(
                    "pwrite (share in place)",
                    rustix::io::Errno::NOSPC,
                ))
            }
            Ok(n) => {
                bytes = &bytes[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Error::os("pwrite (share in place)", e)),
        }
    }
    Ok(())
}

/// `pread` until all of `bytes` is filled from `offset`.
fn read_exact_at(
    fd: rustix::fd::BorrowedFd<'_>,
    mut bytes: &mut [u8],
    mut offset: u64,
) -> Result<()> {
    while !bytes.is_empty() {
        match rustix::io::pread(fd, &mut *bytes, offset) {
            Ok(0) => return Err(Error::os("pread (unshare)", rustix::io::Errno::NXIO)),
            Ok(n) => {
                bytes = &mut std::mem::take(&mut bytes)[n..];
                offset += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Error::os("pread (unshare)", e)),
        }
    }
    Ok(())
}

/// The inode of the shared-memory object `fd` (what `/proc/self/maps` shows for its
/// mappings).
pub(crate) fn inode_of(fd: &rustix::fd::OwnedFd) -> Result<u64> {
    rustix::fs::fstat(fd)
        .map(|st| st.st_ino)
        .map_err(|e| Error::os("fstat (share in place)", e))
}

/// The parts of `[addr, addr + len)` still mapped from the shared-memory object of inode
/// `ino` — all of it, unless the program unmapped some of that memory (freed window memory
/// before the window, as MPICH's test utilities do) and maybe mapped other memory there:
/// pages [`unshare_pages`] may move back. `None` when the map cannot be read.
pub(crate) fn still_mapped_from(ino: u64, addr: usize, len: usize) -> Option<Vec<(usize, usize)>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let end = addr.saturating_add(len);
    let mut parts: Vec<(usize, usize)> = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut fields = line.split_whitespace();
        let (Some(range), Some(inode), Some(path)) = (fields.next(), fields.nth(3), fields.next())
        else {
            continue;
        };
        if inode.parse::<u64>() != Ok(ino) || !path.starts_with(SHM_DIR) {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        let (lo, hi) = (lo.max(addr), hi.min(end));
        if lo >= hi {
            continue;
        }
        // Mappings next to each other (split by the kernel) make one part.
        match parts.last_mut() {
            Some((start, n)) if *start + *n == lo => *n += hi - lo,
            _ => parts.push((lo, hi - lo)),
        }
    }
    Some(parts)
}

/// Sizes the new object `fd` to `len` bytes and reserves its pages in /dev/shm now, so that
/// a segment larger than the free space is an error here rather than a SIGBUS at the first
/// touch of a page (a sparse `ftruncate` alone would succeed for any size).
fn reserve(fd: &rustix::fd::OwnedFd, len: usize) -> Result<()> {
    // `len` comes from `mapped_len`, at most isize::MAX: it fits in u64.
    let bytes = len as u64;
    match rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, bytes) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::NOSPC | rustix::io::Errno::FBIG) => Err(no_room(len)),
        // A file system without fallocate: size it sparsely, as before.
        Err(rustix::io::Errno::OPNOTSUPP) => {
            rustix::fs::ftruncate(fd, bytes).map_err(|e| Error::os("ftruncate", e))
        }
        Err(e) => Err(Error::os("fallocate", e)),
    }
}

/// The error for a segment of `requested` bytes that /dev/shm cannot hold.
#[cold]
fn no_room(requested: usize) -> Error {
    Error::SharedMemoryFull {
        requested,
        available: shm_free_bytes(),
    }
}

/// Free bytes in /dev/shm (0 when it cannot be told).
pub(crate) fn shm_free_bytes() -> u64 {
    rustix::fs::statvfs(SHM_DIR).map_or(0, |s| s.f_bavail.saturating_mul(s.f_frsize))
}

fn map(fd: &rustix::fd::OwnedFd, len: usize) -> Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping at an address chosen by the kernel; it aliases no Rust
    // object. The fd may be closed afterwards, the mapping keeps the object alive.
    let p = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    }
    .map_err(|e| Error::os("mmap", e))?;
    NonNull::new(p.cast()).ok_or_else(|| Error::Bootstrap("mmap returned null".into()))
}

/// Removes every segment of `job` from /dev/shm; returns how many were removed.
pub fn sweep_job(job: &str) -> usize {
    let prefix = format!("{NAME_PREFIX}{job}.");
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    let mut removed = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(&prefix) && shm::unlink(format!("/{name}").as_str()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Names of the segments of `job` currently in /dev/shm (for tests and diagnostics).
pub fn job_segments(job: &str) -> Vec<String> {
    let prefix = format!("{NAME_PREFIX}{job}.");
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn create_open_unlink_roundtrip() {
        let job = random_job_id();
        let a = Segment::create(&job, "0", 100).unwrap();
        assert!(a.len() >= 100);
        let meta = std::fs::metadata(format!("{SHM_DIR}{}", a.name())).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // SAFETY: the segment is at least 100 bytes long and only this test uses it.
        unsafe { a.as_ptr().add(7).write(42) };
        let b = Segment::open(a.name()).unwrap();
        assert_eq!(b.tag(), a.tag());
        // SAFETY: same mapping object, mapped by `b` with the same length.
        assert_eq!(unsafe { b.as_ptr().add(7).read() }, 42);
        a.unlink();
        assert!(job_segments(&job).is_empty());
        // The mappings outlive the name.
        // SAFETY: as above.
        assert_eq!(unsafe { b.as_ptr().add(7).read() }, 42);
    }

    #[test]
    fn drop_removes_name_and_sweep_cleans_leftovers() {
        let job = random_job_id();
        {
            let _s = Segment::create(&job, "1", 10).unwrap();
            assert_eq!(job_segments(&job).len(), 1);
        }
        assert!(job_segments(&job).is_empty());
        let s = Segment::create(&job, "2", 10).unwrap();
        std::mem::forget(s); // simulate a crashed owner
        assert_eq!(sweep_job(&job), 1);
        assert!(job_segments(&job).is_empty());
    }

    /// A private anonymous mapping of `len` bytes for the tests below.
    fn fresh_private(len: usize) -> *mut u8 {
        // SAFETY: a fresh private mapping at an address the kernel picks.
        unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .unwrap()
        .cast::<u8>()
    }

    #[test]
    fn only_written_pages_move_and_come_back() {
        let page = page_size();
        let len = 64 * page;
        let mem = fresh_private(len);
        // Pages 3 and 40..42 written, page 7 only read (the zero page), the rest untouched.
        // SAFETY: our own fresh mapping, touched by this thread only.
        unsafe {
            mem.add(3 * page + 5).write(0xa5);
            std::ptr::write_bytes(mem.add(40 * page), 0x5a, 2 * page);
            assert_eq!(mem.add(7 * page).read_volatile(), 0);
        }
        let at = mem as usize;
        let mut written = Vec::new();
        written_pages(at, len, |o, n| {
            written.push((o, n));
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert!(written.contains(&(3 * page, page)), "{written:?}");
        assert!(written.contains(&(40 * page, 2 * page)), "{written:?}");
        assert!(!written
            .iter()
            .any(|&(o, n)| o <= 20 * page && 20 * page < o + n));
        let seg = Segment::create(&random_job_id(), "0", len).unwrap();
        // SAFETY: our own fresh mapping, touched by this thread only.
        let fd = unsafe { share_pages(&seg, mem, len, true) }.unwrap();
        // The object holds what the pages held; untouched pages are holes in it.
        let mut extents = Vec::new();
        data_extents(fd.as_fd(), 0, len as u64, |o, n| {
            extents.push((o, n));
            Ok(())
        })
        .unwrap();
        assert!(extents.contains(&(3 * page, page)), "{extents:?}");
        assert!(!extents
            .iter()
            .any(|&(o, n)| o <= 20 * page && 20 * page < o + n));
        // SAFETY: the range is mapped from the segment now; the segment's own mapping
        // (a peer's view) sees the same pages.
        unsafe {
            assert_eq!(seg.as_ptr().add(3 * page + 5).read_volatile(), 0xa5);
            assert_eq!(seg.as_ptr().add(41 * page + 9).read_volatile(), 0x5a);
            // A peer writes an untouched page, this process another one.
            seg.as_ptr().add(50 * page + 1).write_volatile(0x11);
            mem.add(60 * page).write_volatile(0x22);
        }
        // The part from page 32 on moves back, read from the object at its offset.
        // SAFETY: pages `share_pages` shared, mapped from `fd` at offset 32 pages.
        unsafe {
            unshare_pages(
                mem.add(32 * page),
                32 * page,
                Some((fd.as_fd(), 32 * page as u64)),
            )
        }
        .unwrap();
        // SAFETY: the first half by the whole, without an object (every page copied).
        unsafe { unshare_pages(mem, 32 * page, None) }.unwrap();
        // Private again: a write through the segment no longer shows.
        // SAFETY: both mappings are live and ours.
        unsafe {
            seg.as_ptr().add(41 * page).write_volatile(0);
            let all = std::slice::from_raw_parts(mem, len);
            for (i, &b) in all.iter().enumerate() {
                let want = match i {
                    i if i == 3 * page + 5 => 0xa5,
                    i if (40 * page..42 * page).contains(&i) => 0x5a,
                    i if i == 50 * page + 1 => 0x11,
                    i if i == 60 * page => 0x22,
                    _ => 0,
                };
                assert_eq!(b, want, "byte {i}");
            }
            rustix::mm::munmap(mem.cast(), len).unwrap();
        }
    }

    #[test]
    fn pages_shared_in_place_are_found_until_the_program_unmaps_them() {
        let page = page_size();
        let len = 4 * page;
        let mem = fresh_private(len);
        let seg = Segment::create(&random_job_id(), "0", len).unwrap();
        // SAFETY: our own fresh mapping, touched by this thread only.
        let fd = unsafe { share_pages(&seg, mem, len, true) }.unwrap();
        let ino = inode_of(&fd).unwrap();
        let at = mem as usize;
        assert_eq!(still_mapped_from(ino, at, len), Some(vec![(at, len)]));
        assert_eq!(
            still_mapped_from(ino, at + page, page),
            Some(vec![(at + page, page)])
        );
        // The program unmaps the second page and maps its own memory at the third.
        // SAFETY: pages of the mapping above, which nothing else uses.
        unsafe {
            rustix::mm::munmap(mem.add(page).cast(), page).unwrap();
            rustix::mm::mmap_anonymous(
                mem.add(2 * page).cast(),
                page,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
            )
            .unwrap();
        }
        assert_eq!(
            still_mapped_from(ino, at, len),
            Some(vec![(at, page), (at + 3 * page, page)])
        );
        // SAFETY: the whole range is ours again (holes included: munmap ignores them).
        unsafe { rustix::mm::munmap(mem.cast(), len).unwrap() };
        assert_eq!(still_mapped_from(ino, at, len), Some(vec![]));
    }

    #[test]
    fn zero_length_maps_one_page() {
        let job = random_job_id();
        let s = Segment::create(&job, "0", 0).unwrap();
        assert_eq!(s.len(), page_size());
        assert!(matches!(
            Segment::create(&job, "0", usize::MAX),
            Err(Error::SharedMemoryFull { .. })
        ));
    }
}
