//! Load/store transport: copies into and out of memory mapped in this process.

/// Copies `len` bytes; small power-of-two sizes become single moves instead of a `memcpy`
/// call, which keeps the 8-byte put on the critical path short.
///
/// Concurrent conflicting accesses to the same bytes are erroneous in MPI; they may tear but
/// never touch anything outside the range.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, the ranges must not
/// overlap, and no Rust reference may cover `dst` (window memory is only ever accessed
/// through raw pointers).
#[inline(always)]
pub(crate) unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees both ranges are valid for `len` bytes and disjoint;
    // unaligned accesses are used because window displacements need not be aligned.
    unsafe {
        match len {
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            4 => dst
                .cast::<u32>()
                .write_unaligned(src.cast::<u32>().read_unaligned()),
            16 => dst
                .cast::<u128>()
                .write_unaligned(src.cast::<u128>().read_unaligned()),
            1 => dst.write(src.read()),
            2 => dst
                .cast::<u16>()
                .write_unaligned(src.cast::<u16>().read_unaligned()),
            _ => std::ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_copies_exactly() {
        for len in 0..40usize {
            let src: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(13) | 1).collect();
            let mut dst = vec![0u8; len + 2];
            // SAFETY: both buffers are valid for len bytes and disjoint.
            unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr().add(1), len) };
            assert_eq!(&dst[1..=len], &src[..]);
            assert_eq!(dst[0], 0);
            assert_eq!(dst[len + 1], 0);
        }
    }
}
