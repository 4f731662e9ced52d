//! Cross-memory attach: `process_vm_writev` / `process_vm_readv` into a peer process.
//!
//! Used for window memory that is not in shared memory (windows created over ordinary user
//! memory, attached regions not from `alloc_mem`). One system call moves the data with a
//! single copy; the target process does not participate, so passive target works.

use std::io::{IoSlice, IoSliceMut};

use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

use crate::error::{Error, Result};

/// Writes all of `src` to `addr` in process `pid`.
pub(crate) fn write(pid: i32, addr: usize, src: &[u8]) -> Result<()> {
    let mut done = 0;
    while done < src.len() {
        let local = [IoSlice::new(&src[done..])];
        let remote = [RemoteIoVec {
            base: addr + done,
            len: src.len() - done,
        }];
        match process_vm_writev(Pid::from_raw(pid), &local, &remote) {
            Ok(0) => {
                return Err(Error::os(
                    "process_vm_writev",
                    std::io::ErrorKind::WriteZero,
                ))
            }
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::os("process_vm_writev", e)),
        }
    }
    Ok(())
}

/// Reads all of `dst` from `addr` in process `pid`.
pub(crate) fn read(pid: i32, addr: usize, dst: &mut [u8]) -> Result<()> {
    let mut done = 0;
    while done < dst.len() {
        let len = dst.len() - done;
        let mut local = [IoSliceMut::new(&mut dst[done..])];
        let remote = [RemoteIoVec {
            base: addr + done,
            len,
        }];
        match process_vm_readv(Pid::from_raw(pid), &mut local, &remote) {
            Ok(0) => {
                return Err(Error::os(
                    "process_vm_readv",
                    std::io::ErrorKind::UnexpectedEof,
                ))
            }
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::os("process_vm_readv", e)),
        }
    }
    Ok(())
}

/// Most iovecs one `process_vm_*` call takes (IOV_MAX on Linux).
const IOV_MAX: usize = 1024;

/// Writes `pieces` — (offset in `src`, offset from `addr`, length) — to process `pid`,
/// up to IOV_MAX pieces per system call.
pub(crate) fn write_pieces(
    pid: i32,
    addr: usize,
    src: &[u8],
    pieces: &[(usize, usize, usize)],
) -> Result<()> {
    for batch in pieces.chunks(IOV_MAX) {
        let local: Vec<IoSlice<'_>> = batch
            .iter()
            .map(|&(o, _, len)| IoSlice::new(&src[o..o + len]))
            .collect();
        let remote: Vec<RemoteIoVec> = batch
            .iter()
            .map(|&(_, t, len)| RemoteIoVec {
                base: addr + t,
                len,
            })
            .collect();
        let want: usize = batch.iter().map(|p| p.2).sum();
        match process_vm_writev(Pid::from_raw(pid), &local, &remote) {
            Ok(n) if n == want => {}
            // A partial transfer (or EINTR): finish piece by piece.
            Ok(_) | Err(nix::errno::Errno::EINTR) => {
                for &(o, t, len) in batch {
                    write(pid, addr + t, &src[o..o + len])?;
                }
            }
            Err(e) => return Err(Error::os("process_vm_writev", e)),
        }
    }
    Ok(())
}

/// Reads `pieces` — (offset in `dst`, offset from `addr`, length) — from process `pid`.
pub(crate) fn read_pieces(
    pid: i32,
    addr: usize,
    dst: &mut [u8],
    pieces: &[(usize, usize, usize)],
) -> Result<()> {
    for batch in pieces.chunks(IOV_MAX) {
        let want: usize = batch.iter().map(|p| p.2).sum();
        let result = {
            // Pieces of one layout never overlap in the origin buffer (the origin layout's
            // blocks are disjoint byte ranges), so the mutable slices are disjoint.
            let mut local: Vec<IoSliceMut<'_>> = Vec::with_capacity(batch.len());
            let mut rest: &mut [u8] = dst;
            let mut consumed = 0;
            let mut order: Vec<usize> = (0..batch.len()).collect();
            order.sort_by_key(|&i| batch[i].0);
            let mut sorted_remote = Vec::with_capacity(batch.len());
            for &i in &order {
                let (o, t, len) = batch[i];
                if o < consumed {
                    // Overlapping destination pieces: fall back to one call per piece.
                    local.clear();
                    break;
                }
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(o - consumed);
                let (piece, tail) = tail.split_at_mut(len);
                local.push(IoSliceMut::new(piece));
                sorted_remote.push(RemoteIoVec {
                    base: addr + t,
                    len,
                });
                rest = tail;
                consumed = o + len;
            }
            if local.len() == batch.len() {
                Some(process_vm_readv(
                    Pid::from_raw(pid),
                    &mut local,
                    &sorted_remote,
                ))
            } else {
                None
            }
        };
        match result {
            Some(Ok(n)) if n == want => {}
            Some(Err(e)) if e != nix::errno::Errno::EINTR => {
                return Err(Error::os("process_vm_readv", e))
            }
            _ => {
                for &(o, t, len) in batch {
                    read(pid, addr + t, &mut dst[o..o + len])?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CMA into our own process exercises the same system calls as into a peer.
    #[test]
    fn roundtrip_into_self() {
        let pid = std::process::id() as i32;
        let mut target = vec![0u8; 10_000];
        let src: Vec<u8> = (0..10_000).map(|i| (i % 251) as u8).collect();
        write(pid, target.as_mut_ptr() as usize, &src).unwrap();
        assert_eq!(target, src);
        let mut back = vec![0u8; 10_000];
        read(pid, target.as_ptr() as usize, &mut back).unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn vectored_pieces() {
        let pid = std::process::id() as i32;
        let mut target = vec![0u8; 64];
        let src: Vec<u8> = (1..=32).collect();
        let pieces = [(0, 40, 4), (4, 0, 8), (12, 20, 20)];
        write_pieces(pid, target.as_mut_ptr() as usize, &src, &pieces).unwrap();
        assert_eq!(&target[40..44], &src[0..4]);
        assert_eq!(&target[0..8], &src[4..12]);
        assert_eq!(&target[20..40], &src[12..32]);
        let mut back = vec![0u8; 32];
        read_pieces(pid, target.as_ptr() as usize, &mut back, &pieces).unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn bad_address_is_an_error_not_a_crash() {
        let pid = std::process::id() as i32;
        assert!(write(pid, 8, b"x").is_err());
        let mut b = [0u8; 1];
        assert!(read(pid, 8, &mut b).is_err());
    }
}
