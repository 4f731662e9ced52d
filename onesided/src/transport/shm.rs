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
            _ if len >= LARGE_COPY => copy_large(src, dst, len),
            _ => std::ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// From this size on a copy takes [`copy_large`]'s routine.
const LARGE_COPY: usize = 32 << 10;

/// Large copies: glibc's `memcpy` unless `ONESIDED_LARGE_COPY` names `movsb` (`rep movsb`,
/// the kernel's copy) or `nt` (streaming stores). On the 2-vCPU Xeon of docs/performance.md (2 MiB L2
/// per core, 480 MiB L3) `memcpy` and `movsb` tie from 32 KiB to 4 MiB; streaming stores
/// take twice as long up to 1 MiB, are 1.25× faster for 2 MiB puts and 3% slower at 4 MiB.
/// On a 2-vCPU AMD EPYC (1 MiB L2 per core, 32 MiB L3; 2026-11-25, put and
/// get of 128 KiB–4 MiB, two rounds) `memcpy` and `movsb` tie again and streaming stores are
/// 1.4–1.6× slower at every size — not a rule to hard-wire, so the knob stays for machines
/// where it pays. `scripts/large-copy.sh` checks the result against Open MPI.
#[cold]
unsafe fn copy_large(src: *const u8, dst: *mut u8, len: usize) {
    static MODE: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    let mode = *MODE.get_or_init(|| match std::env::var("ONESIDED_LARGE_COPY").as_deref() {
        Ok("movsb") => 1,
        Ok("nt") => 2,
        _ => 0,
    });
    // SAFETY: as for copy_bytes (the caller's guarantees).
    unsafe {
        match mode {
            #[cfg(target_arch = "x86_64")]
            1 => rep_movsb(src, dst, len),
            #[cfg(target_arch = "x86_64")]
            2 => copy_nontemporal(src, dst, len),
            _ => std::ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// `rep movsb`: the string copy the kernel uses for its own copies (fast on CPUs with
/// ERMS/FSRM), which decides its own store strategy by size.
///
/// # Safety
/// As for [`copy_bytes`].
#[cfg(target_arch = "x86_64")]
unsafe fn rep_movsb(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: the caller guarantees `len` readable bytes at `src` and writable at `dst`,
    // disjoint; the direction flag is clear (System V ABI), so the copy runs forward.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") len => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags)
        );
    }
}

/// Streaming (non-temporal) stores: the destination bypasses the caches, for copies larger
/// than the caches hold.
///
/// # Safety
/// As for [`copy_bytes`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_nontemporal(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    // Bytes until `dst` is 16-byte aligned (streaming stores need it).
    let head = dst.align_offset(16).min(len);
    let body = (len - head) / 64 * 64;
    // SAFETY: every access stays inside the caller's `len` bytes; the streaming stores go
    // to 16-byte aligned addresses; the fence orders them before any later store (the
    // flag or flush that publishes the data).
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        let (s, d) = (src.add(head), dst.add(head));
        let mut i = 0;
        while i < body {
            let v0 = _mm_loadu_si128(s.add(i).cast::<__m128i>());
            let v1 = _mm_loadu_si128(s.add(i + 16).cast::<__m128i>());
            let v2 = _mm_loadu_si128(s.add(i + 32).cast::<__m128i>());
            let v3 = _mm_loadu_si128(s.add(i + 48).cast::<__m128i>());
            _mm_stream_si128(d.add(i).cast::<__m128i>(), v0);
            _mm_stream_si128(d.add(i + 16).cast::<__m128i>(), v1);
            _mm_stream_si128(d.add(i + 32).cast::<__m128i>(), v2);
            _mm_stream_si128(d.add(i + 48).cast::<__m128i>(), v3);
            i += 64;
        }
        _mm_sfence();
        std::ptr::copy_nonoverlapping(s.add(body), d.add(body), len - head - body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_copies_are_exact_at_every_alignment() {
        let len = LARGE_COPY + 200;
        let src: Vec<u8> = (0..len + 64).map(|i| (i * 7 % 251) as u8).collect();
        for shift in [0usize, 1, 8, 15, 17] {
            let mut dst = vec![0u8; len + 64];
            // SAFETY: both buffers hold shift + len + 1 bytes, and are disjoint.
            unsafe {
                copy_bytes(
                    src.as_ptr().add(shift),
                    dst.as_mut_ptr().add(shift + 1),
                    len,
                )
            };
            assert_eq!(&dst[shift + 1..shift + 1 + len], &src[shift..shift + len]);
            assert_eq!(dst[shift], 0);
            assert_eq!(dst[shift + 1 + len], 0);
        }
        #[cfg(target_arch = "x86_64")]
        for routine in [rep_movsb, copy_nontemporal] {
            for shift in [0usize, 3, 16] {
                let mut dst = vec![0u8; len + 64];
                // SAFETY: as above.
                unsafe { routine(src.as_ptr().add(shift), dst.as_mut_ptr().add(shift), len) };
                assert_eq!(&dst[shift..shift + len], &src[shift..shift + len]);
                assert_eq!(dst[shift + len], 0);
            }
        }
    }

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
