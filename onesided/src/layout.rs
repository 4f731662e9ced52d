//! Derived layouts (MPI derived datatypes, for RMA): which bytes of a buffer an operation
//! reads or writes, and in which order.
//!
//! A [`Layout`] is kept as a list of byte blocks in type-map order, with adjacent blocks
//! merged. An operation pairs the origin's blocks with the target's ([Gerstenberger13], "Handling
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
/// let column = Layout::<f64>::vector(4, 1, 2)?;
/// assert_eq!(column.bytes(), 4 * 8);
/// assert_eq!(column.blocks().len(), 4);
/// // Elements 0..2 and 5..8: two blocks.
/// let pick = Layout::<u32>::indexed(&[(0, 2), (5, 3)])?;
/// assert_eq!(pick.blocks(), &[(0, 8), (20, 12)]);
/// // Offsets that do not fit in the address space are refused, not wrapped.
/// assert!(Layout::<u64>::indexed(&[(usize::MAX / 8, 2)]).is_err());
/// # Ok::<(), onesided::Error>(())
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
    /// Builds a layout from (byte offset, byte length) blocks. Every offset and sum is
    /// checked: a block whose end does not fit in `usize`, or a total that does not, is an
    /// error, so `end` bounds every block of every layout that exists (the window bounds
    /// check relies on it).
    fn from_blocks(raw: impl IntoIterator<Item = Option<(usize, usize)>>) -> Result<Self> {
        let raw = raw.into_iter();
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        // As many as the source says it has at least (a derived datatype's hundreds of
        // blocks grew the list one reallocation at a time); more are reserved one by one.
        blocks
            .try_reserve(raw.size_hint().0)
            .map_err(|_| Error::InvalidArgument("layout: too many blocks for memory".into()))?;
        let (mut bytes, mut end) = (0usize, 0usize);
        for block in raw {
            let (off, len) = block.ok_or_else(too_large)?;
            if len == 0 {
                continue;
            }
            let block_end = off.checked_add(len).ok_or_else(too_large)?;
            bytes = bytes.checked_add(len).ok_or_else(too_large)?;
            end = end.max(block_end);
            match blocks.last_mut() {
                Some(last) if last.0 + last.1 == off => last.1 += len,
                _ => {
                    // A block list too long for memory is an error, not an abort.
                    if blocks.len() == blocks.capacity() {
                        blocks.try_reserve(1).map_err(|_| {
                            Error::InvalidArgument("layout: too many blocks for memory".into())
                        })?;
                    }
                    blocks.push((off, len))
                }
            }
        }
        Ok(Layout {
            blocks,
            bytes,
            end,
            _elem: PhantomData,
        })
    }

    fn elem() -> usize {
        std::mem::size_of::<T>()
    }

    /// The same byte blocks as a layout of elements of `E` (whether they select whole
    /// elements is checked where that matters: accumulates).
    pub(crate) fn retyped<E>(&self) -> Layout<E> {
        Layout {
            blocks: self.blocks.clone(),
            bytes: self.bytes,
            end: self.end,
            _elem: PhantomData,
        }
    }

    /// `count` elements in bytes, if that fits in `usize`.
    fn elems(count: usize) -> Option<usize> {
        count.checked_mul(Self::elem())
    }

    /// `count` consecutive elements (MPI_Type_contiguous). Errors when the extent does not
    /// fit in the address space.
    pub fn contiguous(count: usize) -> Result<Self> {
        Self::from_blocks([Self::elems(count).map(|len| (0, len))])
    }

    /// `count` blocks of `blocklen` elements, block `i` starting at element `i * stride`
    /// (MPI_Type_vector). Errors when an offset or the extent does not fit in the address
    /// space.
    pub fn vector(count: usize, blocklen: usize, stride: usize) -> Result<Self> {
        // The last block bounds all others: refuse at once what would fail only after
        // walking (and storing) a huge number of blocks.
        let last = count.saturating_sub(1).checked_mul(stride);
        if count > 0
            && last
                .and_then(|l| l.checked_add(blocklen))
                .and_then(Self::elems)
                .is_none()
        {
            return Err(too_large());
        }
        let len = Self::elems(blocklen);
        Self::from_blocks((0..count).map(|i| Some((Self::elems(i.checked_mul(stride)?)?, len?))))
    }

    /// Blocks given as (displacement, length) in elements, in this order
    /// (MPI_Type_indexed). Errors when an offset or the extent does not fit in the address
    /// space.
    pub fn indexed(blocks: &[(usize, usize)]) -> Result<Self> {
        Self::from_blocks(
            blocks
                .iter()
                .map(|&(d, l)| Some((Self::elems(d)?, Self::elems(l)?))),
        )
    }

    /// Some fields of each of `count` consecutive records of type `T` (an MPI struct type
    /// over a Pod struct): `fields` are (byte offset, byte length) inside one record, in
    /// the order they are transferred. Errors when a field does not fit in `T`, or the
    /// extent does not fit in the address space.
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
        if let Some(&(off, len)) = fields
            .iter()
            .find(|&&(off, len)| off.checked_add(len).is_none_or(|end| end > e))
        {
            return Err(Error::InvalidArgument(format!(
                "layout field at byte {off} of length {len} does not fit in a {e}-byte record"
            )));
        }
        if Self::elems(count).is_none() {
            return Err(too_large());
        }
        Self::from_blocks((0..count).flat_map(|i| {
            let record = Self::elems(i);
            fields
                .iter()
                .map(move |&(off, len)| Some((record?.checked_add(off)?, len)))
        }))
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

    /// True when every block lies inside a buffer of `bytes` bytes. Checks each block, not
    /// only [`Layout::end`], so that no accepted layout can reach outside a window even if
    /// the construction invariant were ever broken.
    pub(crate) fn fits_in(&self, bytes: usize) -> bool {
        self.end <= bytes
            && self
                .blocks
                .iter()
                .all(|&(off, len)| off.checked_add(len).is_some_and(|e| e <= bytes))
    }

    /// True when every block is whole elements of `unit` bytes at offsets that are
    /// multiples of `unit` (needed by accumulate: element-wise atomicity).
    pub(crate) fn splits_into(&self, unit: usize) -> bool {
        self.blocks
            .iter()
            .all(|&(off, len)| off % unit == 0 && len % unit == 0)
    }
}

#[cold]
fn too_large() -> Error {
    Error::InvalidArgument(
        "layout: an offset or the extent does not fit in the address space".into(),
    )
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
        let l = Layout::<u16>::indexed(&[(0, 2), (2, 3), (9, 0), (10, 1)]).unwrap();
        assert_eq!(l.blocks(), &[(0, 10), (20, 2)]);
        assert_eq!((l.bytes(), l.end()), (12, 22));
        let v = Layout::<u8>::vector(3, 2, 2).unwrap();
        assert_eq!(v.blocks(), &[(0, 6)], "stride == blocklen is contiguous");
        assert_eq!(
            Layout::<u64>::contiguous(0).unwrap().blocks(),
            &[] as &[(usize, usize)]
        );
    }

    #[test]
    fn pairing_yields_fewest_copies() {
        let o = Layout::<u8>::indexed(&[(0, 4), (10, 4)]).unwrap();
        let t = Layout::<u8>::vector(4, 2, 3).unwrap();
        let p: Vec<_> = pieces([o.blocks(), t.blocks()]).collect();
        assert_eq!(
            p,
            vec![([0, 0], 2), ([2, 3], 2), ([10, 6], 2), ([12, 9], 2)]
        );
        let c = Layout::<u8>::contiguous(8).unwrap();
        assert_eq!(pieces([c.blocks(), c.blocks()]).count(), 1);
        assert_eq!(pieces([o.blocks(), c.blocks()]).count(), 2);
        // Three ways (get_accumulate: origin, result, target).
        let r = Layout::<u8>::indexed(&[(0, 3), (3, 5)]).unwrap();
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
        let shifted = Layout::<u8>::indexed(&[(2, 4)]).unwrap();
        assert!(
            !shifted.splits_into(4),
            "offset 2 is not on a 4-byte element boundary"
        );
    }

    #[test]
    fn offsets_that_wrap_are_refused() {
        // Each of these wrapped around the address space before and passed the bounds check.
        assert!(Layout::<u8>::indexed(&[(0usize.wrapping_sub(16), 17)]).is_err());
        assert!(Layout::<u64>::indexed(&[(usize::MAX / 8, 1)]).is_err());
        assert!(Layout::<u64>::indexed(&[(0, usize::MAX / 4)]).is_err());
        assert!(Layout::<u32>::contiguous(usize::MAX / 2).is_err());
        assert!(Layout::<u32>::vector(3, 1, usize::MAX / 4).is_err());
        assert!(Layout::<u8>::vector(2, usize::MAX, 1).is_err());
        assert!(Layout::<[u8; 16]>::fields(usize::MAX / 8, &[(0, 1)]).is_err());
        assert!(Layout::<[u8; 16]>::fields(1, &[(usize::MAX, 2)]).is_err());
        // Two blocks whose byte total overflows although each block fits.
        assert!(Layout::<u8>::indexed(&[(0, usize::MAX - 1), (0, 8)]).is_err());
    }

    proptest::proptest! {
        /// Whatever (displacement, length) list a user passes, an accepted layout has every
        /// block inside [0, end), `bytes` is the sum of the block lengths, and `fits_in`
        /// agrees with a block-by-block check done in wide arithmetic.
        #[test]
        fn accepted_layouts_stay_inside_their_extent(
            raw in proptest::collection::vec(
                (proptest::prop_oneof![
                    0usize..64,
                    (usize::MAX / 16)..=usize::MAX,
                    proptest::num::usize::ANY
                ], proptest::prop_oneof![0usize..16, proptest::num::usize::ANY]),
                0..12),
            window in proptest::prop_oneof![0usize..2048, proptest::num::usize::ANY],
        ) {
            let wide_ok = raw.iter().all(|&(d, l)| {
                (d as u128 + l as u128) * 8 <= usize::MAX as u128
            }) && raw.iter().map(|&(_, l)| l as u128 * 8).sum::<u128>() <= usize::MAX as u128;
            match Layout::<u64>::indexed(&raw) {
                Ok(layout) => {
                    let mut total = 0u128;
                    for &(off, len) in layout.blocks() {
                        proptest::prop_assert!(len > 0);
                        proptest::prop_assert!(off as u128 + len as u128 <= layout.end() as u128);
                        total += len as u128;
                    }
                    proptest::prop_assert_eq!(total, layout.bytes() as u128);
                    let every_block_fits = layout.blocks().iter()
                        .all(|&(off, len)| off as u128 + len as u128 <= window as u128);
                    proptest::prop_assert_eq!(layout.fits_in(window), every_block_fits);
                }
                Err(_) => proptest::prop_assert!(!wide_ok, "refused a layout that fits: {:?}", raw),
            }
        }
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
