//! Derived layouts (MPI derived datatypes, for RMA): which bytes of a buffer an operation
//! reads or writes, and in which order.
//!
//! A [`Layout`] is kept as a list of byte blocks in type-map order, with adjacent blocks
//! merged. An operation pairs the origin's blocks with the target's (seed 003, "Handling
//! Datatypes"): walking both lists at once yields the fewest contiguous copies, each the
//! overlap of the current origin block and the current target block.

use std::marker::PhantomData;

use bytemuck::Pod;

use crate::error::{Error, Result};

/// Which parts of a buffer of `T` an RMA operation touches, in order.
///
/// ```
/// use onesided::Layout;
/// // Every other element of 8 (a column of a 4x2 matrix stored row by row).
/// let column = Layout::<f64>::vector(4, 1, 2);
/// assert_eq!(column.bytes(), 4 * 8);
/// assert_eq!(column.blocks().len(), 4);
/// // Elements 0..2 and 5..8: two blocks.
/// let pick = Layout::<u32>::indexed(&[(0, 2), (5, 3)]);
/// assert_eq!(pick.blocks(), &[(0, 8), (20, 12)]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout<T> {
    /// (byte offset, byte length), in order, non-empty, adjacent blocks merged.
    blocks: Vec<(usize, usize)>,
    /// Total bytes.
    bytes: usize,
    /// One past the highest byte touched.
    end: usize,
    _elem: PhantomData<fn() -> T>,
}

impl<T: Pod> Layout<T> {
    fn from_blocks(raw: impl IntoIterator<Item = (usize, usize)>) -> Self {
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        let (mut bytes, mut end) = (0, 0);
        for (off, len) in raw.into_iter().filter(|&(_, len)| len > 0) {
            bytes += len;
            end = end.max(off + len);
            match blocks.last_mut() {
                Some(last) if last.0 + last.1 == off => last.1 += len,
                _ => blocks.push((off, len)),
            }
        }
        Layout {
            blocks,
            bytes,
            end,
            _elem: PhantomData,
        }
    }

    fn elem() -> usize {
        std::mem::size_of::<T>()
    }

    /// `count` consecutive elements (MPI_Type_contiguous).
    pub fn contiguous(count: usize) -> Self {
        Self::from_blocks([(0, count * Self::elem())])
    }

    /// `count` blocks of `blocklen` elements, block `i` starting at element `i * stride`
    /// (MPI_Type_vector).
    pub fn vector(count: usize, blocklen: usize, stride: usize) -> Self {
        let e = Self::elem();
        Self::from_blocks((0..count).map(|i| (i * stride * e, blocklen * e)))
    }

    /// Blocks given as (displacement, length) in elements, in this order
    /// (MPI_Type_indexed).
    pub fn indexed(blocks: &[(usize, usize)]) -> Self {
        let e = Self::elem();
        Self::from_blocks(blocks.iter().map(|&(d, l)| (d * e, l * e)))
    }

    /// Some fields of each of `count` consecutive records of type `T` (an MPI struct type
    /// over a Pod struct): `fields` are (byte offset, byte length) inside one record, in
    /// the order they are transferred. Errors when a field does not fit in `T`.
    ///
    /// ```
    /// use onesided::{Layout, Pod, Zeroable};
    /// #[derive(Clone, Copy, Pod, Zeroable)]
    /// #[repr(C)]
    /// struct Particle { pos: [f64; 3], vel: [f64; 3], id: u64 }
    /// // Only the positions of 10 particles.
    /// let pos = Layout::<Particle>::fields(10, &[(0, 24)])?;
    /// assert_eq!(pos.bytes(), 240);
    /// # Ok::<(), onesided::Error>(())
    /// ```
    pub fn fields(count: usize, fields: &[(usize, usize)]) -> Result<Self> {
        let e = Self::elem();
        if let Some(&(off, len)) = fields.iter().find(|&&(off, len)| off + len > e) {
            return Err(Error::InvalidArgument(format!(
                "layout field at byte {off} of length {len} does not fit in a {e}-byte record"
            )));
        }
        Ok(Self::from_blocks((0..count).flat_map(|i| {
            fields.iter().map(move |&(off, len)| (i * e + off, len))
        })))
    }

    /// The byte blocks, in transfer order, adjacent ones merged.
    pub fn blocks(&self) -> &[(usize, usize)] {
        &self.blocks
    }

    /// Number of bytes transferred.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// One past the highest byte touched, relative to the start of the buffer.
    pub fn end(&self) -> usize {
        self.end
    }

    /// True when every block is whole elements of `unit` bytes at offsets that are
    /// multiples of `unit` (needed by accumulate: element-wise atomicity).
    pub(crate) fn splits_into(&self, unit: usize) -> bool {
        self.blocks
            .iter()
            .all(|&(off, len)| off % unit == 0 && len % unit == 0)
    }
}

/// Pairs `N` block lists of equal total size into the fewest contiguous pieces: each item
/// is the byte offset in every list and the length of a run contiguous in all of them.
pub(crate) fn pieces<'a, const N: usize>(
    lists: [&'a [(usize, usize)]; N],
) -> impl Iterator<Item = ([usize; N], usize)> + 'a {
    let mut index = [0usize; N];
    let mut done = [0usize; N];
    std::iter::from_fn(move || {
        let mut len = usize::MAX;
        let mut offsets = [0usize; N];
        for k in 0..N {
            let &(off, blen) = lists[k].get(index[k])?;
            offsets[k] = off + done[k];
            len = len.min(blen - done[k]);
        }
        for k in 0..N {
            done[k] += len;
            if done[k] == lists[k][index[k]].1 {
                index[k] += 1;
                done[k] = 0;
            }
        }
        Some((offsets, len))
    })
}

/// Error unless origin and target describe the same number of bytes.
pub(crate) fn check_match(op: &'static str, origin: usize, target: usize) -> Result<()> {
    if origin == target {
        Ok(())
    } else {
        Err(Error::LayoutMismatch { op, origin, target })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_merge_and_skip_empty() {
        let l = Layout::<u16>::indexed(&[(0, 2), (2, 3), (9, 0), (10, 1)]);
        assert_eq!(l.blocks(), &[(0, 10), (20, 2)]);
        assert_eq!((l.bytes(), l.end()), (12, 22));
        let v = Layout::<u8>::vector(3, 2, 2);
        assert_eq!(v.blocks(), &[(0, 6)], "stride == blocklen is contiguous");
        assert_eq!(
            Layout::<u64>::contiguous(0).blocks(),
            &[] as &[(usize, usize)]
        );
    }

    #[test]
    fn pairing_yields_fewest_copies() {
        let o = Layout::<u8>::indexed(&[(0, 4), (10, 4)]);
        let t = Layout::<u8>::vector(4, 2, 3);
        let p: Vec<_> = pieces([o.blocks(), t.blocks()]).collect();
        assert_eq!(
            p,
            vec![([0, 0], 2), ([2, 3], 2), ([10, 6], 2), ([12, 9], 2)]
        );
        let c = Layout::<u8>::contiguous(8);
        assert_eq!(pieces([c.blocks(), c.blocks()]).count(), 1);
        assert_eq!(pieces([o.blocks(), c.blocks()]).count(), 2);
        // Three ways (get_accumulate: origin, result, target).
        let r = Layout::<u8>::indexed(&[(0, 3), (3, 5)]);
        let p3: Vec<_> = pieces([o.blocks(), r.blocks(), c.blocks()]).collect();
        assert_eq!(p3, vec![([0, 0, 0], 4), ([10, 4, 4], 4)]);
    }

    #[test]
    fn fields_of_records() {
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        #[repr(C)]
        struct R {
            a: u32,
            b: u32,
            c: u64,
        }
        let l = Layout::<R>::fields(3, &[(8, 8), (0, 4)]).unwrap();
        assert_eq!(
            l.blocks(),
            &[(8, 8), (0, 4), (24, 8), (16, 4), (40, 8), (32, 4)]
        );
        assert!(Layout::<R>::fields(1, &[(12, 8)]).is_err());
        assert!(l.splits_into(4) && !l.splits_into(8));
        let shifted = Layout::<u8>::indexed(&[(2, 4)]);
        assert!(
            !shifted.splits_into(4),
            "offset 2 is not on a 4-byte element boundary"
        );
    }

    #[test]
    fn mismatch_is_an_error() {
        assert!(check_match("put", 8, 8).is_ok());
        assert!(matches!(
            check_match("put", 8, 16),
            Err(Error::LayoutMismatch {
                origin: 8,
                target: 16,
                ..
            })
        ));
    }
}
