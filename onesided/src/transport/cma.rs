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
    fn bad_address_is_an_error_not_a_crash() {
        let pid = std::process::id() as i32;
        assert!(write(pid, 8, b"x").is_err());
        let mut b = [0u8; 1];
        assert!(read(pid, 8, &mut b).is_err());
    }
}
