//! Datatypes: what `count` elements of an `MPI_Datatype` select, as byte blocks in type-map
//! order — the form onesided's layouts take.
//!
//! A predefined type is read from its handle (`abi::builtin`). A derived one is flattened
//! once, recursively, through `MPI_Type_get_envelope`/`MPI_Type_get_contents` (any type the
//! program builds from the combiners below), and the result is cached as an attribute of
//! the datatype whose delete callback MPICH runs exactly when the handle becomes reusable
//! (freed and no longer referenced by another type), so a reused handle is flattened anew.
//! Operations in flight keep their own copy of the blocks they need.

use std::borrow::Cow;
use std::os::raw::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use onesided::{ElemType, Error, Layout, Result};

use crate::abi::{self, Combiner, MPI_Datatype};

/// One instance of a datatype, flattened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flat {
    /// (byte offset from the buffer address, bytes), in type-map order, consecutive blocks
    /// merged.
    pub blocks: Vec<(isize, usize)>,
    /// `MPI_Type_size`.
    pub size: usize,
    /// `MPI_Type_get_extent`'s extent: where the next instance starts.
    pub extent: isize,
    /// The one predefined element type all basic components share (accumulates need it):
    /// `Some(None)` for bytes (`MPI_PACKED`, characters), `None` when components differ or are not known
    /// to the accumulate paths.
    pub elem: Option<Option<ElemType>>,
    /// Blocks appended while building it, its children's included: the work a flatten
    /// did, which must grow with the blocks, not the bytes (tests read it).
    pub steps: usize,
}

impl Flat {
    fn empty() -> Flat {
        Flat {
            blocks: Vec::new(),
            size: 0,
            extent: 0,
            elem: None,
            steps: 0,
        }
    }

    /// Appends `len` bytes at offset `off`, merged with the last block where they follow it.
    #[inline]
    fn push_block(&mut self, off: isize, len: usize) {
        self.steps += 1;
        match self.blocks.last_mut() {
            Some(last) if last.0 + last.1 as isize == off => last.1 += len,
            _ => self.blocks.push((off, len)),
        }
    }

    /// Appends `other` shifted by `shift` bytes.
    fn push_shifted(&mut self, other: &Flat, shift: isize) {
        for &(off, len) in &other.blocks {
            self.push_block(off + shift, len);
        }
        self.size += other.size;
    }

    /// Appends `n` consecutive instances of `child` (each `child.extent` bytes after the
    /// last) from byte `at`. A child that is one run filling its extent (a predefined type,
    /// a contiguous run of one) makes one block however large `n` is: the cost is that of
    /// the blocks, not of the elements.
    #[inline]
    fn push_repeated(&mut self, child: &Flat, at: isize, n: usize) {
        match child.blocks.as_slice() {
            _ if n == 0 => {}
            [] => {}
            &[(off, len)] if len as isize == child.extent => {
                self.push_block(at + off, len.saturating_mul(n));
                self.size += child.size.saturating_mul(n);
            }
            _ => {
                for j in 0..n {
                    self.push_shifted(child, at + j as isize * child.extent);
                }
            }
        }
    }

    /// The element type of the whole, given the first component's and this one's.
    fn join_elem(&mut self, first: bool, other: Option<Option<ElemType>>) {
        self.elem = if first {
            other
        } else if self.elem == other {
            self.elem
        } else {
            None
        };
    }
}

/// `count` instances of `ty`: blocks relative to the buffer address, total bytes, and the
/// element type of accumulates.
pub(crate) fn selection(count: i64, ty: MPI_Datatype) -> Result<Selection> {
    let count = usize::try_from(count)
        .map_err(|_| Error::InvalidCount(format!("negative count {count}")))?;
    if let Some((e, size, extent)) = abi::padded_pair(ty) {
        // Each pair's data bytes, one block per struct (the padding is not part of it).
        let bytes = count
            .checked_mul(extent)
            .map(|_| count * size)
            .ok_or_else(|| Error::InvalidArgument("count overflows".into()))?;
        return Ok(Selection {
            blocks: Blocks::Many((0..count).map(|i| ((i * extent) as isize, size)).collect()),
            bytes,
            elem: Some(Some(e)),
        });
    }
    if let Some(b) = abi::builtin(ty) {
        let bytes = count
            .checked_mul(b.size)
            .ok_or_else(|| Error::InvalidArgument("count overflows".into()))?;
        return Ok(Selection {
            blocks: if bytes == 0 {
                Blocks::Empty
            } else {
                Blocks::One([(0, bytes)])
            },
            bytes,
            elem: Some(b.elem),
        });
    }
    let shape = cached(ty)?;
    let elem = shape.flat.elem;
    if count == 1 {
        // The common case of a derived type: its cached blocks and layouts, not a copy.
        return Ok(Selection {
            bytes: shape.flat.size,
            elem,
            blocks: Blocks::Shared(shape),
        });
    }
    let mut all = Flat::empty();
    all.push_repeated(&shape.flat, 0, count);
    Ok(Selection {
        blocks: Blocks::Many(all.blocks),
        bytes: all.size,
        elem,
    })
}

/// A derived datatype as its cached attribute keeps it: the flattened instance, its lowest
/// and highest byte, and its byte layouts as origins and targets use them, each made at
/// its first use (a type built for one call pays for each once; a reused one never again).
#[derive(Debug)]
pub(crate) struct Shape {
    flat: Flat,
    /// The lowest offset of a block (0 without blocks).
    low: isize,
    /// One past the highest byte of a block.
    high: isize,
    /// The blocks shifted by `-low` (an origin's view starts at its lowest byte).
    from_low: OnceLock<Layout<u8>>,
    /// The blocks as they are (a target whose blocks lie at or above its displacement).
    from_zero: OnceLock<Layout<u8>>,
}

impl Shape {
    fn new(flat: Flat) -> Shape {
        let low = flat.blocks.iter().map(|b| b.0).min().unwrap_or(0);
        let high = flat
            .blocks
            .iter()
            .map(|b| b.0 + b.1 as isize)
            .max()
            .unwrap_or(0);
        Shape {
            flat,
            low,
            high,
            from_low: OnceLock::new(),
            from_zero: OnceLock::new(),
        }
    }
}

/// `MPI_Type_size` of `ty`: a predefined type's from its handle, a derived one's from the
/// host (no flattening). An invalid handle is `MPI_ERR_TYPE`.
pub(crate) fn type_size(ty: MPI_Datatype) -> Result<usize> {
    if let Some((_, size, _)) = abi::padded_pair(ty) {
        return Ok(size);
    }
    if let Some(b) = abi::builtin(ty) {
        return Ok(b.size);
    }
    let mut size: c_int = 0;
    // SAFETY: a datatype handle of the program; MPI checks it.
    let rc = unsafe { (crate::host::host().type_size)(ty, &mut size) };
    if rc != abi::MPI_SUCCESS || size < 0 {
        return Err(Error::InvalidDatatype(format!("invalid datatype {ty:#x}")));
    }
    Ok(size as usize)
}

/// The blocks of a selection: a predefined type's one run needs no allocation (the common
/// case of every call).
#[derive(Debug, Clone)]
pub(crate) enum Blocks {
    Empty,
    One([(isize, usize); 1]),
    Many(Vec<(isize, usize)>),
    /// One instance of a derived type: its cached shape.
    Shared(Arc<Shape>),
}

/// What an origin or target argument selects.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    /// (offset from the buffer address, bytes), in order.
    pub blocks: Blocks,
    /// Total bytes.
    pub bytes: usize,
    /// The element type of accumulates (see [`Flat::elem`]).
    pub elem: Option<Option<ElemType>>,
}

impl Selection {
    /// (offset from the buffer address, bytes), in order.
    pub(crate) fn blocks(&self) -> &[(isize, usize)] {
        match &self.blocks {
            Blocks::Empty => &[],
            Blocks::One(b) => b,
            Blocks::Many(v) => v,
            Blocks::Shared(shape) => &shape.flat.blocks,
        }
    }

    /// One contiguous run starting at the address?
    pub(crate) fn contiguous(&self) -> bool {
        let b = self.blocks();
        b.len() <= 1 && b.first().is_none_or(|b| b.0 == 0)
    }

    /// For an accumulate of value-index pairs whose C struct has padding (`MPI_DOUBLE_INT`
    /// …): every pair as its whole struct (accumulates combine structs; MPI's size leaves
    /// the padding out, so each pair is a block of its own).
    pub(crate) fn whole_pairs(&mut self, e: ElemType) -> Result<()> {
        let Some(data) = abi::pair_data_size(e) else {
            return Ok(());
        };
        let whole = e.size();
        let blocks = self
            .blocks()
            .iter()
            .map(|&(o, l)| {
                (l == data).then_some((o, whole)).ok_or_else(|| {
                    Error::InvalidDatatype(format!(
                        "an accumulate of {} pairs that are not whole",
                        e.name()
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.bytes = blocks.len() * whole;
        self.blocks = Blocks::Many(blocks);
        Ok(())
    }

    /// The lowest offset (0 when empty).
    pub(crate) fn low(&self) -> isize {
        match &self.blocks {
            Blocks::Shared(shape) => shape.low,
            _ => self.blocks().iter().map(|b| b.0).min().unwrap_or(0),
        }
    }

    /// One past the highest byte touched, from the address.
    pub(crate) fn high(&self) -> isize {
        match &self.blocks {
            Blocks::Shared(shape) => shape.high,
            _ => self
                .blocks()
                .iter()
                .map(|b| b.0 + b.1 as isize)
                .max()
                .unwrap_or(0),
        }
    }

    /// A byte layout of these blocks shifted by `-low` (so that it starts at 0); a derived
    /// type's two usual ones (from its lowest byte, and unshifted) are kept with its shape.
    pub(crate) fn layout(&self, low: isize) -> Result<Cow<'_, Layout<u8>>> {
        if let Blocks::Shared(shape) = &self.blocks {
            let kept = if low == shape.low {
                Some(&shape.from_low)
            } else if low == 0 {
                Some(&shape.from_zero)
            } else {
                None
            };
            if let Some(kept) = kept {
                if let Some(l) = kept.get() {
                    return Ok(Cow::Borrowed(l));
                }
                let l = shifted_layout(self.blocks(), low)?;
                return Ok(Cow::Borrowed(kept.get_or_init(|| l)));
            }
        }
        shifted_layout(self.blocks(), low).map(Cow::Owned)
    }
}

/// A byte layout of `blocks` shifted by `-low`.
fn shifted_layout(blocks: &[(isize, usize)], low: isize) -> Result<Layout<u8>> {
    let shifted: Vec<(usize, usize)> = blocks
        .iter()
        .map(|&(o, l)| ((o - low) as usize, l))
        .collect();
    Layout::indexed(&shifted)
}

/// Our keyval on datatypes (made at the first derived type).
static KEYVAL: OnceLock<c_int> = OnceLock::new();

/// Frees the cached blocks when MPICH deletes the attribute (the handle becomes reusable).
unsafe extern "C" fn drop_cached(
    _ty: crate::abi::MPI_Datatype,
    _keyval: c_int,
    value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    // SAFETY: `value` is the Arc made in `cached`, set once per datatype.
    drop(unsafe { Arc::from_raw(value.cast::<Shape>()) });
    abi::MPI_SUCCESS
}

/// `MPI_TYPE_NULL_COPY_FN`: a duplicate of a datatype gets no cached flattening.
unsafe extern "C" fn copy_nothing(
    _ty: MPI_Datatype,
    _keyval: c_int,
    _extra: *mut std::os::raw::c_void,
    _value: *mut std::os::raw::c_void,
    _copy: *mut std::os::raw::c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes the flag's address.
    unsafe { *flag = 0 };
    abi::MPI_SUCCESS
}

fn keyval() -> Result<c_int> {
    if let Some(&k) = KEYVAL.get() {
        return Ok(k);
    }
    let mut k: c_int = 0;
    // SAFETY: our copy function that copies nothing (derived types duplicated by the program
    // flatten anew; Open MPI refuses a null one) and our delete function, of the MPI
    // prototypes.
    let rc = unsafe {
        (crate::host::host().type_create_keyval)(
            Some(copy_nothing),
            Some(drop_cached),
            &mut k,
            std::ptr::null_mut(),
        )
    };
    if rc != abi::MPI_SUCCESS {
        return Err(Error::InvalidArgument(format!(
            "MPI_Type_create_keyval: error {rc}"
        )));
    }
    Ok(*KEYVAL.get_or_init(|| k))
}

/// The flattened form of derived type `ty`, from its attribute or made now.
fn cached(ty: MPI_Datatype) -> Result<Arc<Shape>> {
    let k = keyval()?;
    let mut value: *mut c_void = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: a datatype handle of the program (MPI checks it) and our keyval.
    let rc = unsafe {
        (crate::host::host().type_get_attr)(
            ty,
            k,
            (&mut value as *mut *mut c_void).cast(),
            &mut flag,
        )
    };
    if rc != abi::MPI_SUCCESS {
        return Err(type_error(ty, "not a datatype"));
    }
    if flag != 0 {
        let p = value.cast::<Shape>().cast_const();
        // SAFETY: the Arc set below; another count for the caller.
        unsafe { Arc::increment_strong_count(p) };
        // SAFETY: as above.
        return Ok(unsafe { Arc::from_raw(p) });
    }
    let flat = Arc::new(Shape::new(flatten(ty)?));
    let raw = Arc::into_raw(Arc::clone(&flat));
    // SAFETY: the attribute owns one count, given back by drop_cached.
    let rc = unsafe { (crate::host::host().type_set_attr)(ty, k, raw.cast_mut().cast()) };
    if rc != abi::MPI_SUCCESS {
        // SAFETY: not taken by MPI.
        drop(unsafe { Arc::from_raw(raw) });
    }
    Ok(flat)
}

fn type_error(ty: MPI_Datatype, what: &str) -> Error {
    Error::InvalidDatatype(format!("{ty:#x}: {what}"))
}

/// The envelope and contents of `ty`.
struct Contents {
    combiner: Combiner,
    ints: Vec<c_int>,
    aints: Vec<abi::MPI_Aint>,
    types: Vec<MPI_Datatype>,
}

fn contents(ty: MPI_Datatype) -> Result<Contents> {
    let (ni, na, nd, combiner) = envelope(ty)?;
    let mut c = Contents {
        combiner: abi::combiner(combiner),
        ints: vec![0; ni as usize],
        aints: vec![0; na as usize],
        types: Vec::new(),
    };
    if c.combiner != Combiner::Named {
        // The host writes handles of its ABI's width (4 bytes each under the MPICH ABI).
        let mut types = vec![0 as abi::Handle; nd as usize];
        // SAFETY: buffers of the sizes the envelope gave (the handle array in words, at
        // least the ABI's width each).
        let rc = unsafe {
            (crate::host::host().type_get_contents)(
                ty,
                ni,
                na,
                nd,
                c.ints.as_mut_ptr(),
                c.aints.as_mut_ptr(),
                types.as_mut_ptr(),
            )
        };
        if rc != abi::MPI_SUCCESS {
            return Err(type_error(ty, "MPI_Type_get_contents failed"));
        }
        // SAFETY: `nd` handles of the ABI's width, written above.
        c.types = (0..nd as usize)
            .map(|i| unsafe { abi::handle_at(types.as_ptr().cast(), i) })
            .collect();
    }
    Ok(c)
}

/// `MPI_Type_get_extent`.
fn extent(ty: MPI_Datatype) -> Result<isize> {
    let (mut lb, mut ext) = (0, 0);
    // SAFETY: a datatype handle.
    let rc = unsafe { (crate::host::host().type_get_extent)(ty, &mut lb, &mut ext) };
    if rc != abi::MPI_SUCCESS {
        return Err(type_error(ty, "MPI_Type_get_extent failed"));
    }
    Ok(ext as isize)
}

/// Flattens one instance of `ty` (predefined or derived).
fn flatten(ty: MPI_Datatype) -> Result<Flat> {
    if let Some(b) = abi::builtin(ty) {
        return Ok(Flat {
            blocks: if b.size == 0 {
                vec![]
            } else {
                vec![(0, b.size)]
            },
            size: b.size,
            extent: b.size as isize,
            elem: Some(b.elem),
            steps: 1,
        });
    }
    let c = contents(ty)?;
    let ext = extent(ty)?;
    if let Some((e, size, _)) = abi::padded_pair(ty) {
        return Ok(Flat {
            blocks: vec![(0, size)],
            size,
            extent: extent(ty)?,
            elem: Some(Some(e)),
            steps: 1,
        });
    }
    if c.combiner == Combiner::Named {
        // A predefined type this library does not know (a pair type, long double, complex):
        // bytes, which put and get move but accumulates do not combine.
        let mut size: c_int = 0;
        // SAFETY: a datatype handle.
        unsafe { (crate::host::host().type_size)(ty, &mut size) };
        return Ok(Flat {
            blocks: if size > 0 {
                vec![(0, size as usize)]
            } else {
                vec![]
            },
            size: size as usize,
            extent: ext,
            elem: None,
            steps: 1,
        });
    }
    let children: Vec<Flat> = c.types.iter().map(|&t| flatten(t)).collect::<Result<_>>()?;
    for &t in &c.types {
        free_if_derived(t);
    }
    combine(&c, ext, &children)
}

/// One instance of a derived type from its contents (`c`), extent and flattened children:
/// blocks in type-map order. The work is proportional to the blocks made: runs of dense
/// children are placed whole, and subarrays and darrays place a whole run of their
/// fastest dimension at a time.
fn combine(c: &Contents, ext: isize, children: &[Flat]) -> Result<Flat> {
    let ints = |i: usize| c.ints[i] as isize;
    let mut out = Flat::empty();
    out.extent = ext;
    out.steps = children.iter().map(|ch| ch.steps).sum();
    // Places `n` consecutive instances of child `k` at byte `at`.
    let place = |out: &mut Flat, k: usize, at: isize, n: isize, first: &mut bool| {
        let child = &children[k];
        out.push_repeated(child, at, n.max(0) as usize);
        if n > 0 {
            out.join_elem(*first, child.elem);
            *first = false;
        }
    };
    let mut first = true;
    match c.combiner {
        Combiner::Dup | Combiner::Resized => place(&mut out, 0, 0, 1, &mut first),
        Combiner::Contiguous => place(&mut out, 0, 0, ints(0), &mut first),
        Combiner::Vector => {
            let e = children[0].extent;
            for j in 0..ints(0) {
                place(&mut out, 0, j * ints(2) * e, ints(1), &mut first);
            }
        }
        Combiner::Hvector => {
            for j in 0..ints(0) {
                place(&mut out, 0, j * c.aints[0] as isize, ints(1), &mut first);
            }
        }
        Combiner::Indexed => {
            let (n, e) = (ints(0) as usize, children[0].extent);
            for j in 0..n {
                place(&mut out, 0, ints(1 + n + j) * e, ints(1 + j), &mut first);
            }
        }
        Combiner::Hindexed => {
            let n = ints(0) as usize;
            for j in 0..n {
                place(&mut out, 0, c.aints[j] as isize, ints(1 + j), &mut first);
            }
        }
        Combiner::IndexedBlock => {
            let (n, e) = (ints(0) as usize, children[0].extent);
            for j in 0..n {
                place(&mut out, 0, ints(2 + j) * e, ints(1), &mut first);
            }
        }
        Combiner::HindexedBlock => {
            let n = ints(0) as usize;
            for j in 0..n {
                place(&mut out, 0, c.aints[j] as isize, ints(1), &mut first);
            }
        }
        Combiner::Struct => {
            let n = ints(0) as usize;
            for j in 0..n {
                place(&mut out, j, c.aints[j] as isize, ints(1 + j), &mut first);
            }
        }
        Combiner::Subarray => {
            let d = ints(0) as usize;
            let sizes: Vec<isize> = (0..d).map(|i| ints(1 + i)).collect();
            let subs: Vec<isize> = (0..d).map(|i| ints(1 + d + i)).collect();
            let starts: Vec<isize> = (0..d).map(|i| ints(1 + 2 * d + i)).collect();
            let fortran = c.ints[1 + 3 * d] == abi::abi().order_fortran;
            // Each dimension's selected indices: one run each.
            let runs: Vec<Vec<(isize, isize)>> =
                (0..d).map(|k| vec![(starts[k], subs[k])]).collect();
            place_grid(&mut out, &children[0], &sizes, &runs, fortran, &mut first);
        }
        Combiner::Darray => {
            // size, rank, ndims, gsizes, distribs, dargs, psizes, order (MPI-4.1 §5.1.4).
            let d = ints(2) as usize;
            let field = |f: usize, i: usize| ints(3 + f * d + i);
            let (gsizes, psizes): (Vec<isize>, Vec<isize>) =
                (0..d).map(|i| (field(0, i), field(3, i).max(1))).unzip();
            // This process's coordinates in the process grid (always row-major).
            let mut coords = vec![0isize; d];
            let mut r = ints(1);
            for i in (0..d).rev() {
                coords[i] = r % psizes[i];
                r /= psizes[i];
            }
            // The global indices this process owns in each dimension, as increasing runs.
            let runs: Vec<Vec<(isize, isize)>> = (0..d)
                .map(|i| {
                    let (g, p, c, darg) = (gsizes[i], psizes[i], coords[i], field(2, i));
                    let a = abi::abi();
                    match field(1, i) {
                        k if k == a.distribute_block => {
                            let b = if darg == a.distribute_dflt_darg {
                                (g + p - 1) / p
                            } else {
                                darg
                            };
                            let (lo, hi) = (c * b, ((c + 1) * b).min(g));
                            if lo < hi {
                                vec![(lo, hi - lo)]
                            } else {
                                vec![]
                            }
                        }
                        k if k == a.distribute_cyclic => {
                            let b = if darg == a.distribute_dflt_darg {
                                1
                            } else {
                                darg
                            }
                            .max(1);
                            // Blocks of b indices, every p-th one from this coordinate.
                            (0..)
                                .map(|k| (c + k * p) * b)
                                .take_while(|&lo| lo < g)
                                .map(|lo| (lo, b.min(g - lo)))
                                .collect()
                        }
                        // MPI_DISTRIBUTE_NONE: the whole dimension.
                        _ => vec![(0, g)],
                    }
                })
                .collect();
            let fortran = c.ints[3 + 4 * d] == abi::abi().order_fortran;
            place_grid(&mut out, &children[0], &gsizes, &runs, fortran, &mut first);
        }
        other => {
            return Err(Error::Unsupported(format!(
                "datatype combiner {other:?} (Fortran parameterized types) is not supported"
            )))
        }
    }
    Ok(out)
}

/// Places the elements of an array of `dims` (elements of `child`) whose index in
/// dimension `k` lies in one of `runs[k]` ((first index, length), increasing), in array
/// order (C: the last dimension varies fastest; Fortran: the first): one run of the
/// fastest dimension at a time.
fn place_grid(
    out: &mut Flat,
    child: &Flat,
    dims: &[isize],
    runs: &[Vec<(isize, isize)>],
    fortran: bool,
    first: &mut bool,
) {
    let d = dims.len();
    let runs: Vec<Vec<(isize, isize)>> = runs
        .iter()
        .map(|r| r.iter().copied().filter(|&(_, len)| len > 0).collect())
        .collect();
    if d == 0 || runs.iter().any(|r| r.is_empty()) {
        return;
    }
    // Dimensions from the slowest-varying to the fastest.
    let order: Vec<usize> = if fortran {
        (0..d).rev().collect()
    } else {
        (0..d).collect()
    };
    let fastest = order[d - 1];
    let e = child.extent;
    // The linear index (in elements) where each selected run of the fastest dimension
    // begins, less its start in that dimension: the slower dimensions expanded once, the
    // slowest first.
    let mut rows: Vec<isize> = vec![0];
    for &k in &order[..d - 1] {
        let count: isize = runs[k].iter().map(|&(_, len)| len).sum();
        let mut next = Vec::with_capacity(rows.len() * count as usize);
        for &r in &rows {
            for &(lo, len) in &runs[k] {
                next.extend((lo..lo + len).map(|i| r * dims[k] + i));
            }
        }
        rows = next;
    }
    out.blocks.reserve(rows.len() * runs[fastest].len());
    let row = dims[fastest];
    match child.blocks.as_slice() {
        // A dense child (the common case: a predefined type): each run is one block.
        &[(off, len)] if len as isize == e => {
            for &r in &rows {
                for &(lo, n) in &runs[fastest] {
                    out.push_block((r * row + lo) * e + off, len * n as usize);
                }
            }
            out.size +=
                child.size * rows.len() * runs[fastest].iter().map(|r| r.1 as usize).sum::<usize>();
        }
        _ => {
            for &r in &rows {
                for &(lo, n) in &runs[fastest] {
                    out.push_repeated(child, (r * row + lo) * e, n as usize);
                }
            }
        }
    }
    out.join_elem(*first, child.elem);
    *first = false;
}

/// Frees a datatype handle `MPI_Type_get_contents` returned, unless it is predefined.
fn free_if_derived(ty: MPI_Datatype) {
    let Ok((_, _, _, c)) = envelope(ty) else {
        return;
    };
    if abi::combiner(c) != Combiner::Named {
        let mut t = ty;
        // SAFETY: a derived handle MPI_Type_get_contents gave us to free.
        unsafe { (crate::host::host().type_free)(&mut t) };
    }
}

/// `MPI_Type_get_envelope`: the counts of integers, addresses and types, and the combiner.
fn envelope(ty: MPI_Datatype) -> Result<(c_int, c_int, c_int, c_int)> {
    let (mut ni, mut na, mut nd, mut combiner) = (0, 0, 0, 0);
    // SAFETY: a datatype handle (checked by MPI).
    let rc = unsafe {
        (crate::host::host().type_get_envelope)(ty, &mut ni, &mut na, &mut nd, &mut combiner)
    };
    if rc != abi::MPI_SUCCESS {
        return Err(type_error(ty, "not a datatype"));
    }
    Ok((ni, na, nd, combiner))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flattened predefined type of `size` bytes.
    fn basic(size: usize) -> Flat {
        Flat {
            blocks: vec![(0, size)],
            size,
            extent: size as isize,
            elem: Some(None),
            steps: 1,
        }
    }

    fn contents(combiner: Combiner, ints: Vec<c_int>, aints: Vec<abi::MPI_Aint>) -> Contents {
        Contents {
            combiner,
            ints,
            aints,
            types: vec![],
        }
    }

    /// A C-order 2-D subarray of `rows` rows of `row` bytes in an array twice as wide.
    fn byte_subarray(rows: c_int, row: c_int) -> (Contents, isize) {
        let c = contents(
            Combiner::Subarray,
            vec![2, 2 * rows, 2 * row, rows, row, 1, 3, 56],
            vec![],
        );
        (c, (4 * rows * row) as isize)
    }

    #[test]
    fn a_subarray_of_bytes_costs_its_rows_not_its_bytes() {
        for (rows, row) in [(1, 16), (16, 256), (256, 4096), (256, 65536)] {
            let (c, ext) = byte_subarray(rows, row);
            let flat = combine(&c, ext, &[basic(1)]).unwrap();
            assert_eq!(flat.blocks.len(), rows as usize, "{rows} x {row}");
            assert_eq!(flat.size, (rows * row) as usize);
            // One block per row (and the child's one step): 16 Mi bytes in 256 steps.
            assert!(flat.steps <= rows as usize + 1, "{} steps", flat.steps);
            let first = (2 * row + 3) as isize;
            assert_eq!(flat.blocks[0], (first, row as usize));
            if rows > 1 {
                assert_eq!(flat.blocks[1].0 - flat.blocks[0].0, (2 * row) as isize);
            }
        }
    }

    #[test]
    fn vectors_and_contiguous_runs_cost_their_blocks() {
        // 1 Mi contiguous bytes: one block, one step.
        let c = contents(Combiner::Contiguous, vec![1 << 20], vec![]);
        let flat = combine(&c, 1 << 20, &[basic(1)]).unwrap();
        assert_eq!(flat.blocks, vec![(0, 1 << 20)]);
        assert!(flat.steps <= 2);
        // 64 rows of 4 KiB ints, stride 8 Ki ints: 64 blocks, 64 steps.
        let c = contents(Combiner::Vector, vec![64, 1024, 2048], vec![]);
        let flat = combine(&c, (63 * 2048 + 1024) * 4, &[basic(4)]).unwrap();
        assert_eq!(flat.blocks.len(), 64);
        assert_eq!(flat.blocks[1], (8192, 4096));
        assert!(flat.steps <= 65, "{} steps", flat.steps);
        // A child with a gap is placed instance by instance (its blocks are the work).
        let gapped = Flat {
            blocks: vec![(0, 4)],
            size: 4,
            extent: 8,
            elem: Some(None),
            steps: 1,
        };
        let c = contents(Combiner::Contiguous, vec![10], vec![]);
        let flat = combine(&c, 80, &[gapped]).unwrap();
        assert_eq!(flat.blocks.len(), 10);
        assert_eq!(flat.blocks[9], (72, 4));
    }

    #[test]
    fn subarrays_in_fortran_order_and_empty_dimensions() {
        // Fortran order: the first dimension is the fastest. 3 x 2 of a 4 x 5 array of
        // ints, starting at (1, 2): columns of 3 ints at rows 2 and 3.
        let c = contents(
            Combiner::Subarray,
            vec![2, 4, 5, 3, 2, 1, 2, abi::abi().order_fortran],
            vec![],
        );
        let flat = combine(&c, 80, &[basic(4)]).unwrap();
        assert_eq!(
            flat.blocks,
            vec![((2 * 4 + 1) * 4, 12), ((3 * 4 + 1) * 4, 12)]
        );
        // A dimension of zero elements selects nothing.
        let c = contents(Combiner::Subarray, vec![2, 4, 5, 0, 2, 0, 0, 56], vec![]);
        let flat = combine(&c, 80, &[basic(4)]).unwrap();
        assert!(flat.blocks.is_empty());
        assert_eq!(flat.size, 0);
    }

    #[test]
    fn a_cyclic_darray_is_runs_of_its_blocks() {
        // 1-D darray of 10 ints over 2 processes, cyclic(3), this is process 1: indices
        // 3..6 and 9..10.
        let c = contents(
            Combiner::Darray,
            vec![2, 1, 1, 10, abi::abi().distribute_cyclic as c_int, 3, 2, 56],
            vec![],
        );
        let flat = combine(&c, 40, &[basic(4)]).unwrap();
        assert_eq!(flat.blocks, vec![(12, 12), (36, 4)]);
        // Block distribution of a 2-D 4 x 6 array over 2 x 2: process 3 owns rows 2..4,
        // columns 3..6 — two rows of three ints.
        let b = abi::abi().distribute_block as c_int;
        let d = abi::abi().distribute_dflt_darg as c_int;
        let c = contents(
            Combiner::Darray,
            vec![4, 3, 2, 4, 6, b, b, d, d, 2, 2, 56],
            vec![],
        );
        let flat = combine(&c, 96, &[basic(4)]).unwrap();
        assert_eq!(
            flat.blocks,
            vec![((2 * 6 + 3) * 4, 12), ((3 * 6 + 3) * 4, 12)]
        );
    }
}
