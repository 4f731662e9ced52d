//! Datatypes: what `count` elements of an `MPI_Datatype` select, as byte blocks in type-map
//! order — the form onesided's layouts take.
//!
//! A predefined type is read from its handle (`abi::builtin`). A derived one is flattened
//! once, recursively, through `MPI_Type_get_envelope`/`MPI_Type_get_contents` (any type the
//! program builds from the combiners below), and the result is cached as an attribute of
//! the datatype whose delete callback MPICH runs exactly when the handle becomes reusable
//! (freed and no longer referenced by another type), so a reused handle is flattened anew.
//! Operations in flight keep their own copy of the blocks they need.

use std::os::raw::{c_int, c_void};
use std::sync::{Arc, OnceLock};

use mpi::ffi;
use onesided::{ElemType, Error, Layout, Result};

use crate::abi::{self, MPI_Datatype};

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
}

impl Flat {
    fn empty() -> Flat {
        Flat {
            blocks: Vec::new(),
            size: 0,
            extent: 0,
            elem: None,
        }
    }

    /// Appends `other` shifted by `shift` bytes.
    fn push_shifted(&mut self, other: &Flat, shift: isize) {
        for &(off, len) in &other.blocks {
            let off = off + shift;
            match self.blocks.last_mut() {
                Some(last) if last.0 + last.1 as isize == off => last.1 += len,
                _ => self.blocks.push((off, len)),
            }
        }
        self.size += other.size;
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
    let flat = cached(ty)?;
    let mut all = Flat::empty();
    for i in 0..count {
        all.push_shifted(&flat, i as isize * flat.extent);
    }
    Ok(Selection {
        blocks: Blocks::Many(all.blocks),
        bytes: all.size,
        elem: flat.elem,
    })
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
    let rc = unsafe { ffi::MPI_Type_size(ffi::MPI_Datatype(ty), &mut size) };
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
        self.blocks().iter().map(|b| b.0).min().unwrap_or(0)
    }

    /// One past the highest byte touched, from the address.
    pub(crate) fn high(&self) -> isize {
        self.blocks()
            .iter()
            .map(|b| b.0 + b.1 as isize)
            .max()
            .unwrap_or(0)
    }

    /// A byte layout of these blocks shifted by `-low` (so that it starts at 0).
    pub(crate) fn layout(&self, low: isize) -> Result<Layout<u8>> {
        let shifted: Vec<(usize, usize)> = self
            .blocks()
            .iter()
            .map(|&(o, l)| ((o - low) as usize, l))
            .collect();
        Layout::indexed(&shifted)
    }
}

/// Our keyval on datatypes (made at the first derived type).
static KEYVAL: OnceLock<c_int> = OnceLock::new();

/// Frees the cached blocks when MPICH deletes the attribute (the handle becomes reusable).
unsafe extern "C" fn drop_cached(
    _ty: ffi::MPI_Datatype,
    _keyval: c_int,
    value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    // SAFETY: `value` is the Arc made in `cached`, set once per datatype.
    drop(unsafe { Arc::from_raw(value.cast::<Flat>()) });
    abi::MPI_SUCCESS
}

fn keyval() -> Result<c_int> {
    if let Some(&k) = KEYVAL.get() {
        return Ok(k);
    }
    let mut k: c_int = 0;
    // SAFETY: a null copy function (derived types duplicated by the program flatten
    // anew) and our delete function of the MPI prototype.
    let rc = unsafe {
        ffi::MPI_Type_create_keyval(None, Some(drop_cached), &mut k, std::ptr::null_mut())
    };
    if rc != abi::MPI_SUCCESS {
        return Err(Error::InvalidArgument(format!(
            "MPI_Type_create_keyval: error {rc}"
        )));
    }
    Ok(*KEYVAL.get_or_init(|| k))
}

/// The flattened form of derived type `ty`, from its attribute or made now.
fn cached(ty: MPI_Datatype) -> Result<Arc<Flat>> {
    let k = keyval()?;
    let mut value: *mut c_void = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: a datatype handle of the program (MPI checks it) and our keyval.
    let rc = unsafe {
        ffi::MPI_Type_get_attr(
            ffi::MPI_Datatype(ty),
            k,
            (&mut value as *mut *mut c_void).cast(),
            &mut flag,
        )
    };
    if rc != abi::MPI_SUCCESS {
        return Err(type_error(ty, "not a datatype"));
    }
    if flag != 0 {
        let p = value.cast::<Flat>().cast_const();
        // SAFETY: the Arc set below; another count for the caller.
        unsafe { Arc::increment_strong_count(p) };
        // SAFETY: as above.
        return Ok(unsafe { Arc::from_raw(p) });
    }
    let flat = Arc::new(flatten(ty)?);
    let raw = Arc::into_raw(Arc::clone(&flat));
    // SAFETY: the attribute owns one count, given back by drop_cached.
    let rc = unsafe { ffi::MPI_Type_set_attr(ffi::MPI_Datatype(ty), k, raw.cast_mut().cast()) };
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
    combiner: c_int,
    ints: Vec<c_int>,
    aints: Vec<abi::MPI_Aint>,
    types: Vec<MPI_Datatype>,
}

fn contents(ty: MPI_Datatype) -> Result<Contents> {
    let (ni, na, nd, combiner) = envelope(ty)?;
    let mut c = Contents {
        combiner,
        ints: vec![0; ni as usize],
        aints: vec![0; na as usize],
        types: vec![0; nd as usize],
    };
    if combiner != COMBINER_NAMED {
        // SAFETY: buffers of the sizes the envelope gave.
        let rc = unsafe {
            ffi::MPI_Type_get_contents(
                ffi::MPI_Datatype(ty),
                ni,
                na,
                nd,
                c.ints.as_mut_ptr(),
                c.aints.as_mut_ptr(),
                c.types.as_mut_ptr().cast(),
            )
        };
        if rc != abi::MPI_SUCCESS {
            return Err(type_error(ty, "MPI_Type_get_contents failed"));
        }
    }
    Ok(c)
}

const COMBINER_NAMED: c_int = 1;
const COMBINER_DUP: c_int = 2;
const COMBINER_CONTIGUOUS: c_int = 3;
const COMBINER_VECTOR: c_int = 4;
const COMBINER_HVECTOR: c_int = 6;
const COMBINER_INDEXED: c_int = 7;
const COMBINER_HINDEXED: c_int = 9;
const COMBINER_INDEXED_BLOCK: c_int = 10;
const COMBINER_STRUCT: c_int = 12;
const COMBINER_SUBARRAY: c_int = 13;
const COMBINER_RESIZED: c_int = 18;
const COMBINER_HINDEXED_BLOCK: c_int = 19;
const COMBINER_DARRAY: c_int = 14;
const ORDER_FORTRAN: c_int = 57;
const DISTRIBUTE_BLOCK: isize = 121;
const DISTRIBUTE_CYCLIC: isize = 122;
const DISTRIBUTE_DFLT_DARG: isize = -49767;

/// `MPI_Type_get_extent`.
fn extent(ty: MPI_Datatype) -> Result<isize> {
    let (mut lb, mut ext) = (0, 0);
    // SAFETY: a datatype handle.
    let rc = unsafe { ffi::MPI_Type_get_extent(ffi::MPI_Datatype(ty), &mut lb, &mut ext) };
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
        });
    }
    if c.combiner == COMBINER_NAMED {
        // A predefined type this library does not know (a pair type, long double, complex):
        // bytes, which put and get move but accumulates do not combine.
        let mut size: c_int = 0;
        // SAFETY: a datatype handle.
        unsafe { ffi::MPI_Type_size(ffi::MPI_Datatype(ty), &mut size) };
        return Ok(Flat {
            blocks: if size > 0 {
                vec![(0, size as usize)]
            } else {
                vec![]
            },
            size: size as usize,
            extent: ext,
            elem: None,
        });
    }
    let children: Vec<Flat> = c.types.iter().map(|&t| flatten(t)).collect::<Result<_>>()?;
    for &t in &c.types {
        free_if_derived(t);
    }
    let ints = |i: usize| c.ints[i] as isize;
    let mut out = Flat::empty();
    out.extent = ext;
    // Places `n` consecutive instances of child `k` at byte `at`.
    let place = |out: &mut Flat, k: usize, at: isize, n: isize, first: &mut bool| {
        let child = &children[k];
        for j in 0..n.max(0) {
            out.push_shifted(child, at + j * child.extent);
        }
        if n > 0 {
            out.join_elem(*first, child.elem);
            *first = false;
        }
    };
    let mut first = true;
    match c.combiner {
        COMBINER_DUP | COMBINER_RESIZED => place(&mut out, 0, 0, 1, &mut first),
        COMBINER_CONTIGUOUS => place(&mut out, 0, 0, ints(0), &mut first),
        COMBINER_VECTOR => {
            let e = children[0].extent;
            for j in 0..ints(0) {
                place(&mut out, 0, j * ints(2) * e, ints(1), &mut first);
            }
        }
        COMBINER_HVECTOR => {
            for j in 0..ints(0) {
                place(&mut out, 0, j * c.aints[0] as isize, ints(1), &mut first);
            }
        }
        COMBINER_INDEXED => {
            let (n, e) = (ints(0) as usize, children[0].extent);
            for j in 0..n {
                place(&mut out, 0, ints(1 + n + j) * e, ints(1 + j), &mut first);
            }
        }
        COMBINER_HINDEXED => {
            let n = ints(0) as usize;
            for j in 0..n {
                place(&mut out, 0, c.aints[j] as isize, ints(1 + j), &mut first);
            }
        }
        COMBINER_INDEXED_BLOCK => {
            let (n, e) = (ints(0) as usize, children[0].extent);
            for j in 0..n {
                place(&mut out, 0, ints(2 + j) * e, ints(1), &mut first);
            }
        }
        COMBINER_HINDEXED_BLOCK => {
            let n = ints(0) as usize;
            for j in 0..n {
                place(&mut out, 0, c.aints[j] as isize, ints(1), &mut first);
            }
        }
        COMBINER_STRUCT => {
            let n = ints(0) as usize;
            for j in 0..n {
                place(&mut out, j, c.aints[j] as isize, ints(1 + j), &mut first);
            }
        }
        COMBINER_SUBARRAY => {
            let d = ints(0) as usize;
            let sizes: Vec<isize> = (0..d).map(|i| ints(1 + i)).collect();
            let subs: Vec<isize> = (0..d).map(|i| ints(1 + d + i)).collect();
            let starts: Vec<isize> = (0..d).map(|i| ints(1 + 2 * d + i)).collect();
            let fortran = c.ints[1 + 3 * d] == ORDER_FORTRAN;
            // Dimensions from the slowest-varying to the fastest.
            let order: Vec<usize> = if fortran {
                (0..d).rev().collect()
            } else {
                (0..d).collect()
            };
            let e = children[0].extent;
            let total: isize = subs.iter().product();
            let mut index = vec![0isize; d];
            for _ in 0..total.max(0) {
                let mut linear = 0isize;
                for &k in &order {
                    linear = linear * sizes[k] + starts[k] + index[k];
                }
                place(&mut out, 0, linear * e, 1, &mut first);
                // Next index, fastest dimension first.
                for &k in order.iter().rev() {
                    index[k] += 1;
                    if index[k] < subs[k] {
                        break;
                    }
                    index[k] = 0;
                }
            }
        }
        COMBINER_DARRAY => {
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
            // The global indices this process owns in each dimension, increasing.
            let owned: Vec<Vec<isize>> = (0..d)
                .map(|i| {
                    let (g, p, c, darg) = (gsizes[i], psizes[i], coords[i], field(2, i));
                    match field(1, i) {
                        DISTRIBUTE_BLOCK => {
                            let b = if darg == DISTRIBUTE_DFLT_DARG {
                                (g + p - 1) / p
                            } else {
                                darg
                            };
                            (c * b..((c + 1) * b).min(g)).collect()
                        }
                        DISTRIBUTE_CYCLIC => {
                            let b = if darg == DISTRIBUTE_DFLT_DARG {
                                1
                            } else {
                                darg
                            };
                            (0..g).filter(|&x| (x / b.max(1)) % p == c).collect()
                        }
                        // MPI_DISTRIBUTE_NONE: the whole dimension.
                        _ => (0..g).collect(),
                    }
                })
                .collect();
            let fortran = c.ints[3 + 4 * d] == ORDER_FORTRAN;
            // Dimensions from the slowest-varying to the fastest.
            let order: Vec<usize> = if fortran {
                (0..d).rev().collect()
            } else {
                (0..d).collect()
            };
            let e = children[0].extent;
            if owned.iter().all(|o| !o.is_empty()) {
                let mut index = vec![0usize; d];
                'all: loop {
                    let mut linear = 0isize;
                    for &k in &order {
                        linear = linear * gsizes[k] + owned[k][index[k]];
                    }
                    place(&mut out, 0, linear * e, 1, &mut first);
                    // Next index, fastest dimension first.
                    for &k in order.iter().rev() {
                        index[k] += 1;
                        if index[k] < owned[k].len() {
                            continue 'all;
                        }
                        index[k] = 0;
                    }
                    break;
                }
            }
        }
        other => {
            return Err(Error::Unsupported(format!(
                "datatype combiner {other} (Fortran parameterized types) is not supported"
            )))
        }
    }
    Ok(out)
}

/// Frees a datatype handle `MPI_Type_get_contents` returned, unless it is predefined.
fn free_if_derived(ty: MPI_Datatype) {
    let Ok((_, _, _, c)) = envelope(ty) else {
        return;
    };
    if c != COMBINER_NAMED {
        let mut t = ffi::MPI_Datatype(ty);
        // SAFETY: a derived handle MPI_Type_get_contents gave us to free.
        unsafe { ffi::MPI_Type_free(&mut t) };
    }
}

/// `MPI_Type_get_envelope`: the counts of integers, addresses and types, and the combiner.
fn envelope(ty: MPI_Datatype) -> Result<(c_int, c_int, c_int, c_int)> {
    let (mut ni, mut na, mut nd, mut combiner) = (0, 0, 0, 0);
    // SAFETY: a datatype handle (checked by MPI).
    let rc = unsafe {
        ffi::MPI_Type_get_envelope(
            ffi::MPI_Datatype(ty),
            &mut ni,
            &mut na,
            &mut nd,
            &mut combiner,
        )
    };
    if rc != abi::MPI_SUCCESS {
        return Err(type_error(ty, "not a datatype"));
    }
    Ok((ni, na, nd, combiner))
}
