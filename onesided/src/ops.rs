//! Element types and operations of accumulates, and their CPU-atomic implementations.
//!
//! MPI requires concurrent accumulates of the same type to the same location to be
//! element-wise atomic, across single-element (fetch_and_op, compare_and_swap) and
//! multi-element calls. On mapped memory every (operation, type) pair here is one CPU atomic
//! per element: the instruction x86 has for it (`lock xadd`, `lock and/or/xor`, `xchg`, a
//! plain aligned load or store) or a compare-and-swap loop (prod, max, min, logical ops and
//! everything on floating point, on the value's bit pattern). Memory that is not mapped
//! (cross-memory attach), misaligned elements, and windows whose
//! `mpi_accumulate_granularity` asks for coarser synchronization use lock stripes instead
//! (`rma::accumulate`).

use std::sync::atomic::{
    AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

use bytemuck::Pod;

use crate::backoff::Backoff;
use crate::error::{Error, Result};

/// Most bytes one multi-element update moves under its stripes: bounds how long it keeps
/// other accumulates to the same target waiting.
pub(crate) const ACC_CHUNK: usize = 64 << 10;

/// Most bytes of an accumulate of several elements that is atomic as a whole, not only
/// element-wise, where CPU or network atomics update its elements (`rma::accumulate`'s
/// module docs); also the granule its stripes are keyed by.
pub(crate) const WHOLE_OP_MAX: usize = 64;

/// The stripes (of `stripes`) that granules `first..=last` map to, each once, in ascending
/// order: the order in which every holder of several stripes takes them. A wrapping run
/// gives its low stripes first (`0..end`), then its high ones (`start..stripes`).
pub(crate) fn stripes_for(
    first: usize,
    last: usize,
    stripes: usize,
) -> std::iter::Chain<std::ops::Range<usize>, std::ops::Range<usize>> {
    let count = last - first + 1;
    if count >= stripes {
        return (0..0).chain(0..stripes);
    }
    let start = first % stripes;
    let end = start + count;
    if end <= stripes {
        (0..0).chain(start..end)
    } else {
        (0..end - stripes).chain(start..stripes)
    }
}

/// Held accumulate lock stripes; released on drop. Keeps the words' iterator (a clone of
/// the one they were taken by) instead of a list: taking stripes is on the path of every
/// accumulate a target serves, and allocates nothing.
pub(crate) struct StripesHeld<'a, I: Iterator<Item = &'a AtomicU64> + Clone> {
    words: I,
    count: usize,
}

impl<'a, I: Iterator<Item = &'a AtomicU64> + Clone> Drop for StripesHeld<'a, I> {
    fn drop(&mut self) {
        for word in self.words.clone().take(self.count) {
            // Release: the element updates made under the stripe are visible to its next
            // holder.
            word.store(0, Release);
        }
    }
}

/// Takes the lock stripes `words` (in the order of [`stripes_for`]) one after the other.
/// Gives up with [`Error::JobAborted`] once `aborted` says so (releasing what it took): the
/// holder may be a rank that died inside its update.
///
/// Deadlock-free because a holder never waits for anything but a later stripe (or, across
/// nodes, its own network operations, which the target completes without a stripe): every
/// holder of several stripes takes them in one order, and a thread that holds one does not
/// serve other processes' requests while it waits for the next (a served accumulate could
/// need a stripe this very thread holds). Holding nothing, a waiter serves as any wait does.
/// A wait past `ONESIDED_HANG_REPORT`'s delay reports the stripe of `target`.
pub(crate) fn lock_stripes<'a, I>(
    words: I,
    aborted: &dyn Fn() -> bool,
    target: usize,
) -> Result<StripesHeld<'a, I>>
where
    I: Iterator<Item = &'a AtomicU64> + Clone,
{
    let mut held = StripesHeld {
        words: words.clone(),
        count: 0,
    };
    for word in words {
        let mut backoff = if held.count == 0 {
            Backoff::new()
        } else {
            Backoff::holding_a_lock()
        };
        let mut hang = crate::diag::HangClock::new();
        // Acquire: the previous holder's element updates are visible to us.
        while word.compare_exchange_weak(0, 1, Acquire, Relaxed).is_err() {
            if aborted() {
                return Err(Error::JobAborted);
            }
            hang.tick(|| stripe_wait(target, held.count));
            backoff.snooze();
        }
        held.count += 1;
    }
    Ok(held)
}

/// What a wait for an accumulate lock stripe of `target` waits for, `held` stripes of the
/// operation taken already (the hang report's line).
#[cold]
pub(crate) fn stripe_wait(target: usize, held: usize) -> String {
    format!(
        "an accumulate lock stripe of rank {target}, held by another accumulate \
         ({held} stripes of this one taken)"
    )
}

/// Elements `i..j` of a run of `n` elements of `size` bytes starting at stripe key `key`
/// that one stripe-locked update moves: as many as fit in [`ACC_CHUNK`] (at least one), and
/// the granules `first..=last` their first bytes fall in.
pub(crate) fn acc_chunk(
    key: usize,
    i: usize,
    n: usize,
    size: usize,
    granule: usize,
) -> (usize, usize, usize) {
    let j = (i + (ACC_CHUNK / size).max(1)).min(n);
    (
        j,
        (key + i * size) / granule,
        (key + (j - 1) * size) / granule,
    )
}

/// Accumulate operations (MPI_Op predefined for RMA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// `target + origin` (integers wrap).
    Sum,
    /// `target * origin` (integers wrap).
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Bitwise and (integers).
    Band,
    /// Bitwise or (integers).
    Bor,
    /// Bitwise xor (integers).
    Bxor,
    /// Logical and, 1 or 0 (integers).
    Land,
    /// Logical or, 1 or 0 (integers).
    Lor,
    /// Logical xor, 1 or 0 (integers).
    Lxor,
    /// The origin value replaces the target value (MPI_REPLACE).
    Replace,
    /// The target is left unchanged; only valid where a result is fetched (MPI_NO_OP).
    NoOp,
    /// The lower value of two value-index pairs with its index (MPI_MINLOC; pair types).
    MinLoc,
    /// The higher value of two value-index pairs with its index (MPI_MAXLOC; pair types).
    MaxLoc,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 14] = [
        Op::Sum,
        Op::Prod,
        Op::Max,
        Op::Min,
        Op::Band,
        Op::Bor,
        Op::Bxor,
        Op::Land,
        Op::Lor,
        Op::Lxor,
        Op::Replace,
        Op::NoOp,
        Op::MinLoc,
        Op::MaxLoc,
    ];

    /// Lower-case name as in MPI (`sum`, `replace`, `no_op`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Prod => "prod",
            Op::Max => "max",
            Op::Min => "min",
            Op::Band => "band",
            Op::Bor => "bor",
            Op::Bxor => "bxor",
            Op::Land => "land",
            Op::Lor => "lor",
            Op::Lxor => "lxor",
            Op::Replace => "replace",
            Op::NoOp => "no_op",
            Op::MinLoc => "minloc",
            Op::MaxLoc => "maxloc",
        }
    }

    /// True when MPI defines this operation on elements of type `ty` ([MPI-4.1] §6.9.2):
    /// bitwise and logical operations on integers, max and min on integers and reals, sum
    /// and product on numbers (complex ones too), MINLOC and MAXLOC on value-index pairs
    /// only; replace and no_op on everything.
    #[inline]
    pub fn valid_for(self, ty: ElemType) -> bool {
        use ElemClass::*;
        let class = ty.class();
        match self {
            Op::Replace | Op::NoOp => true,
            Op::Band | Op::Bor | Op::Bxor | Op::Land | Op::Lor | Op::Lxor => class == Integer,
            Op::Max | Op::Min => matches!(class, Integer | Real) && ty.arithmetic(),
            Op::Sum | Op::Prod => matches!(class, Integer | Real | Complex) && ty.arithmetic(),
            Op::MinLoc | Op::MaxLoc => class == Pair && ty.arithmetic(),
        }
    }
}

/// Element types of accumulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElemType {
    /// `i8`
    I8,
    /// `i16`
    I16,
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `u8`
    U8,
    /// `u16`
    U16,
    /// `u32`
    U32,
    /// `u64`
    U64,
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// [`crate::Complex32`] (`float _Complex`).
    C32,
    /// [`crate::Complex64`] (`double _Complex`).
    C64,
    /// [`crate::LongDouble`] (x87 `long double`).
    LongDouble,
    /// [`crate::LongDoubleComplex`] (`long double _Complex`).
    LongDoubleComplex,
    /// [`crate::FloatInt`] (`MPI_FLOAT_INT`).
    FloatInt,
    /// [`crate::DoubleInt`] (`MPI_DOUBLE_INT`).
    DoubleInt,
    /// [`crate::LongInt`] (`MPI_LONG_INT`).
    LongInt,
    /// [`crate::ShortInt`] (`MPI_SHORT_INT`).
    ShortInt,
    /// [`crate::TwoInt`] (`MPI_2INT`, `MPI_2INTEGER`).
    TwoInt,
    /// [`crate::TwoFloat`] (`MPI_2REAL`).
    TwoFloat,
    /// [`crate::TwoDouble`] (`MPI_2DOUBLE_PRECISION`).
    TwoDouble,
    /// [`crate::LongDoubleInt`] (`MPI_LONG_DOUBLE_INT`).
    LongDoubleInt,
}

/// What kind of number an element type is (which operations MPI defines on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ElemClass {
    Integer,
    Real,
    Complex,
    Pair,
}

impl ElemType {
    /// Every element type (their positions are the codes request rings carry).
    pub(crate) const ALL: [ElemType; 22] = [
        ElemType::I8,
        ElemType::I16,
        ElemType::I32,
        ElemType::I64,
        ElemType::U8,
        ElemType::U16,
        ElemType::U32,
        ElemType::U64,
        ElemType::F32,
        ElemType::F64,
        ElemType::C32,
        ElemType::C64,
        ElemType::LongDouble,
        ElemType::LongDoubleComplex,
        ElemType::FloatInt,
        ElemType::DoubleInt,
        ElemType::LongInt,
        ElemType::ShortInt,
        ElemType::TwoInt,
        ElemType::TwoFloat,
        ElemType::TwoDouble,
        ElemType::LongDoubleInt,
    ];

    /// The element types CPU atomics update and the network carries, the first ones of
    /// [`ElemType::ALL`] (the others go through lock stripes on one node: see
    /// [`crate::elements`]).
    #[cfg_attr(not(all(test, feature = "net")), allow(dead_code))]
    pub(crate) const NATIVE: &'static [ElemType] = ElemType::ALL.split_at(10).0;

    /// True for the integer types.
    #[inline]
    pub fn is_integer(self) -> bool {
        self.class() == ElemClass::Integer
    }

    #[inline]
    pub(crate) fn class(self) -> ElemClass {
        use ElemType::*;
        match self {
            I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64 => ElemClass::Integer,
            F32 | F64 | LongDouble => ElemClass::Real,
            C32 | C64 | LongDoubleComplex => ElemClass::Complex,
            FloatInt | DoubleInt | LongInt | ShortInt | TwoInt | TwoFloat | TwoDouble
            | LongDoubleInt => ElemClass::Pair,
        }
    }

    /// Whether this build computes with the type (`long double` needs the x87 unit).
    #[inline]
    fn arithmetic(self) -> bool {
        !matches!(
            self,
            ElemType::LongDouble | ElemType::LongDoubleComplex | ElemType::LongDoubleInt
        ) || crate::LongDouble::ARITHMETIC
    }

    /// Bytes of one element.
    pub fn size(self) -> usize {
        crate::with_elem_type!(self, E => std::mem::size_of::<E>())
    }

    /// Rust name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ElemType::I8 => "i8",
            ElemType::I16 => "i16",
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
            ElemType::U8 => "u8",
            ElemType::U16 => "u16",
            ElemType::U32 => "u32",
            ElemType::U64 => "u64",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
            ElemType::C32 => "Complex32",
            ElemType::C64 => "Complex64",
            ElemType::LongDouble => "LongDouble",
            ElemType::LongDoubleComplex => "LongDoubleComplex",
            ElemType::FloatInt => "FloatInt",
            ElemType::DoubleInt => "DoubleInt",
            ElemType::LongInt => "LongInt",
            ElemType::ShortInt => "ShortInt",
            ElemType::TwoInt => "TwoInt",
            ElemType::TwoFloat => "TwoFloat",
            ElemType::TwoDouble => "TwoDouble",
            ElemType::LongDoubleInt => "LongDoubleInt",
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Element types that accumulate, fetch_and_op and compare_and_swap accept.
///
/// Implemented for `i8`..`i64`, `u8`..`u64`, `f32`, `f64` and the types of
/// [`crate::elements`] (complex numbers, `long double`, value-index pairs); sealed.
pub trait AccElement: Pod + PartialOrd + Send + Sync + sealed::Sealed {
    /// Runtime tag of the type.
    const TYPE: ElemType;

    /// Whether a CPU atomic updates one element (the primitives); the others are updated
    /// under lock stripes only, and their `fetch_op`, `apply_op` and `compare_swap` are
    /// never called.
    #[doc(hidden)]
    const CPU_ATOMIC: bool = true;

    /// The result of applying `op` to a target value and an origin value (the serial
    /// semantics every atomic implementation follows).
    fn combine(op: Op, target: Self, origin: Self) -> Self;

    /// Applies `op` with `origin` to the element at `ptr` as one atomic step and returns
    /// the previous value.
    ///
    /// # Safety
    /// `ptr` must be valid, aligned for `Self`, and every concurrent access to the element
    /// must be atomic (which the accumulate paths guarantee).
    #[doc(hidden)]
    unsafe fn fetch_op(ptr: *mut Self, op: Op, origin: Self) -> Self;

    /// Like [`AccElement::fetch_op`] without the result (lets `replace` be a store and
    /// `sum` a `lock add`).
    ///
    /// # Safety
    /// As for [`AccElement::fetch_op`].
    #[doc(hidden)]
    unsafe fn apply_op(ptr: *mut Self, op: Op, origin: Self);

    /// Atomic compare-and-swap of the element at `ptr` (bitwise comparison); returns the
    /// previous value.
    ///
    /// # Safety
    /// As for [`AccElement::fetch_op`].
    #[doc(hidden)]
    unsafe fn compare_swap(ptr: *mut Self, compare: Self, value: Self) -> Self;
}

macro_rules! integer_element {
    ($($t:ty => $atomic:ty, $tag:ident;)*) => {$(
        impl sealed::Sealed for $t {}
        impl AccElement for $t {
            const TYPE: ElemType = ElemType::$tag;

            #[inline]
            fn combine(op: Op, a: $t, b: $t) -> $t {
                match op {
                    Op::Sum => a.wrapping_add(b),
                    Op::Prod => a.wrapping_mul(b),
                    Op::Max => a.max(b),
                    Op::Min => a.min(b),
                    Op::Band => a & b,
                    Op::Bor => a | b,
                    Op::Bxor => a ^ b,
                    Op::Land => <$t>::from((a != 0) && (b != 0)),
                    Op::Lor => <$t>::from((a != 0) || (b != 0)),
                    Op::Lxor => <$t>::from((a != 0) != (b != 0)),
                    Op::Replace => b,
                    // MINLOC/MAXLOC take pairs: refused for integers (Op::valid_for).
                    Op::NoOp | Op::MinLoc | Op::MaxLoc => a,
                }
            }

            #[inline(always)]
            unsafe fn fetch_op(ptr: *mut $t, op: Op, b: $t) -> $t {
                // SAFETY: the caller guarantees a valid, aligned element that is only
                // accessed atomically. AcqRel/Acquire: accumulates used for signalling
                // (e.g. a flag polled with fetch_and_op(no_op)) order the data around them.
                let a = unsafe { <$atomic>::from_ptr(ptr) };
                match op {
                    Op::Sum => a.fetch_add(b, AcqRel),
                    Op::Band => a.fetch_and(b, AcqRel),
                    Op::Bor => a.fetch_or(b, AcqRel),
                    Op::Bxor => a.fetch_xor(b, AcqRel),
                    Op::Max => a.fetch_max(b, AcqRel),
                    Op::Min => a.fetch_min(b, AcqRel),
                    Op::Replace => a.swap(b, AcqRel),
                    Op::NoOp => a.load(Acquire),
                    Op::Prod | Op::Land | Op::Lor | Op::Lxor | Op::MinLoc | Op::MaxLoc => a
                        .fetch_update(AcqRel, Acquire, |x| Some(Self::combine(op, x, b)))
                        .unwrap_or_else(|x| x),
                }
            }

            #[inline(always)]
            unsafe fn apply_op(ptr: *mut $t, op: Op, b: $t) {
                match op {
                    // SAFETY: as in fetch_op.
                    Op::Replace => unsafe { <$atomic>::from_ptr(ptr) }.store(b, Release),
                    Op::NoOp => {}
                    // SAFETY: forwarded contract.
                    _ => {
                        unsafe { Self::fetch_op(ptr, op, b) };
                    }
                }
            }

            #[inline(always)]
            unsafe fn compare_swap(ptr: *mut $t, compare: $t, value: $t) -> $t {
                // SAFETY: as in fetch_op.
                match unsafe { <$atomic>::from_ptr(ptr) }
                    .compare_exchange(compare, value, AcqRel, Acquire)
                {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    )*};
}

integer_element! {
    i8 => AtomicI8, I8;
    i16 => AtomicI16, I16;
    i32 => AtomicI32, I32;
    i64 => AtomicI64, I64;
    u8 => AtomicU8, U8;
    u16 => AtomicU16, U16;
    u32 => AtomicU32, U32;
    u64 => AtomicU64, U64;
}

macro_rules! float_element {
    ($($t:ty => $bits:ty, $atomic:ty, $tag:ident;)*) => {$(
        impl sealed::Sealed for $t {}
        impl AccElement for $t {
            const TYPE: ElemType = ElemType::$tag;

            #[inline]
            fn combine(op: Op, a: $t, b: $t) -> $t {
                match op {
                    Op::Sum => a + b,
                    Op::Prod => a * b,
                    Op::Max => if b > a { b } else { a },
                    Op::Min => if b < a { b } else { a },
                    Op::Replace => b,
                    // Bitwise and logical operations are rejected for floats before any
                    // memory is touched (Op::valid_for); no_op leaves the target alone.
                    _ => a,
                }
            }

            #[inline(always)]
            unsafe fn fetch_op(ptr: *mut $t, op: Op, b: $t) -> $t {
                // SAFETY: the caller guarantees a valid, aligned element that is only
                // accessed atomically; floats are updated through their bit pattern.
                let a = unsafe { <$atomic>::from_ptr(ptr.cast::<$bits>()) };
                <$t>::from_bits(match op {
                    Op::Replace => a.swap(b.to_bits(), AcqRel),
                    Op::NoOp => a.load(Acquire),
                    _ => a
                        .fetch_update(AcqRel, Acquire, |x| {
                            Some(Self::combine(op, <$t>::from_bits(x), b).to_bits())
                        })
                        .unwrap_or_else(|x| x),
                })
            }

            #[inline(always)]
            unsafe fn apply_op(ptr: *mut $t, op: Op, b: $t) {
                match op {
                    // SAFETY: as in fetch_op.
                    Op::Replace => unsafe { <$atomic>::from_ptr(ptr.cast::<$bits>()) }
                        .store(b.to_bits(), Release),
                    Op::NoOp => {}
                    // SAFETY: forwarded contract.
                    _ => {
                        unsafe { Self::fetch_op(ptr, op, b) };
                    }
                }
            }

            #[inline(always)]
            unsafe fn compare_swap(ptr: *mut $t, compare: $t, value: $t) -> $t {
                // SAFETY: as in fetch_op.
                let a = unsafe { <$atomic>::from_ptr(ptr.cast::<$bits>()) };
                match a.compare_exchange(compare.to_bits(), value.to_bits(), AcqRel, Acquire) {
                    Ok(v) | Err(v) => <$t>::from_bits(v),
                }
            }
        }
    )*};
}

float_element! {
    f32 => u32, AtomicU32, F32;
    f64 => u64, AtomicU64, F64;
}

macro_rules! striped_element {
    ($($t:ty => $tag:ident, $combine:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl AccElement for $t {
            const TYPE: ElemType = ElemType::$tag;
            const CPU_ATOMIC: bool = false;

            #[inline]
            fn combine(op: Op, a: $t, b: $t) -> $t {
                ($combine)(op, a, b)
            }

            unsafe fn fetch_op(_: *mut $t, _: Op, _: $t) -> $t {
                unreachable!("{} elements are updated under lock stripes", stringify!($t))
            }

            unsafe fn apply_op(_: *mut $t, _: Op, _: $t) {
                unreachable!("{} elements are updated under lock stripes", stringify!($t))
            }

            unsafe fn compare_swap(_: *mut $t, _: $t, _: $t) -> $t {
                unreachable!("{} elements are updated under lock stripes", stringify!($t))
            }
        }
    )*};
}

/// Sum, product and replace of complex numbers (other operations are refused before memory
/// is touched: `Op::valid_for`).
macro_rules! complex_combine {
    ($t:ty) => {
        |op: Op, a: $t, b: $t| match op {
            Op::Sum => <$t>::sum(a, b),
            Op::Prod => <$t>::prod(a, b),
            Op::Replace => b,
            _ => a,
        }
    };
}

/// The operations of `long double`: a real number on the x87 unit.
fn long_double_combine(op: Op, a: LongDouble, b: LongDouble) -> LongDouble {
    match op {
        Op::Sum => a.add(b),
        Op::Prod => a.mul(b),
        Op::Max if b > a => b,
        Op::Min if b < a => b,
        Op::Replace => b,
        _ => a,
    }
}

/// MINLOC, MAXLOC and replace of value-index pairs.
fn pair_combine<P: crate::elements::ValueIndex>(op: Op, a: P, b: P) -> P {
    match op {
        Op::MinLoc => crate::elements::loc(a, b, false),
        Op::MaxLoc => crate::elements::loc(a, b, true),
        Op::Replace => b,
        _ => a,
    }
}

use crate::elements::LongDouble;

striped_element! {
    crate::Complex32 => C32, complex_combine!(crate::Complex32);
    crate::Complex64 => C64, complex_combine!(crate::Complex64);
    crate::LongDouble => LongDouble, long_double_combine;
    crate::LongDoubleComplex => LongDoubleComplex, complex_combine!(crate::LongDoubleComplex);
    crate::FloatInt => FloatInt, pair_combine;
    crate::DoubleInt => DoubleInt, pair_combine;
    crate::LongInt => LongInt, pair_combine;
    crate::ShortInt => ShortInt, pair_combine;
    crate::TwoInt => TwoInt, pair_combine;
    crate::TwoFloat => TwoFloat, pair_combine;
    crate::TwoDouble => TwoDouble, pair_combine;
    crate::LongDoubleInt => LongDoubleInt, pair_combine;
}

/// Applies `op` with `origin` to the consecutive elements at `base`, each element
/// atomically, the previous values into `out` if given. Elements narrower than 8 bytes go
/// eight bytes at a time: one compare-and-swap of an aligned 64-bit word updates every
/// element in it (each still sees one atomic step: any concurrent change of a neighbour
/// makes the word's CAS retry), an eighth of the locked instructions of one atomic per
/// byte; `replace` without results is one atomic store per word.
///
/// # Safety
/// As for [`AccElement::fetch_op`], for `origin.len()` elements from `base`; `out` has as
/// many elements as `origin`.
#[inline]
pub(crate) unsafe fn apply_run<E: AccElement>(
    base: *mut E,
    origin: &[E],
    mut out: Option<&mut [E]>,
    op: Op,
) {
    let size = std::mem::size_of::<E>();
    let lanes = 8 / size.max(1);
    let n = origin.len();
    if size >= 8 || n < 2 * lanes {
        // One atomic per element (the common short run; 8-byte elements always).
        match out {
            Some(o) => {
                for (i, (&v, r)) in origin.iter().zip(o.iter_mut()).enumerate() {
                    // SAFETY: element i of the run (caller's contract).
                    *r = unsafe { E::fetch_op(base.add(i), op, v) };
                }
            }
            None => {
                for (i, &v) in origin.iter().enumerate() {
                    // SAFETY: as above.
                    unsafe { E::apply_op(base.add(i), op, v) };
                }
            }
        }
        return;
    }
    let mut i = 0;
    let one = |i: usize, out: &mut Option<&mut [E]>| match out {
        // SAFETY: element i of the run (caller's contract).
        Some(o) => o[i] = unsafe { E::fetch_op(base.add(i), op, origin[i]) },
        // SAFETY: as above.
        None => unsafe { E::apply_op(base.add(i), op, origin[i]) },
    };
    // Up to the first 8-byte boundary, element by element.
    while i < n && (base.wrapping_add(i) as usize) % 8 != 0 {
        one(i, &mut out);
        i += 1;
    }
    while i + lanes <= n {
        // SAFETY: an aligned word of `lanes` whole elements of the run, only accessed
        // atomically (caller's contract); 64-bit atomics may overlay narrower ones.
        let word = unsafe { AtomicU64::from_ptr(base.add(i).cast::<u64>()) };
        let src = &origin[i..i + lanes];
        let previous = match (op, out.is_some()) {
            (Op::NoOp, _) => word.load(Acquire),
            (Op::Replace, false) => {
                word.store(pack(src), Release);
                0
            }
            (Op::Replace, true) => word.swap(pack(src), AcqRel),
            _ => {
                let mut current = word.load(Relaxed);
                loop {
                    let next = combine_word(current, src, op);
                    match word.compare_exchange_weak(current, next, AcqRel, Acquire) {
                        Ok(_) => break current,
                        Err(seen) => current = seen,
                    }
                }
            }
        };
        if let Some(o) = out.as_deref_mut() {
            let bytes = previous.to_ne_bytes();
            for (k, slot) in o[i..i + lanes].iter_mut().enumerate() {
                *slot = bytemuck::pod_read_unaligned(&bytes[k * size..(k + 1) * size]);
            }
        }
        i += lanes;
    }
    while i < n {
        one(i, &mut out);
        i += 1;
    }
}

/// The word of the elements `src` (8 bytes of them).
#[inline(always)]
fn pack<E: AccElement>(src: &[E]) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(bytemuck::cast_slice(src));
    u64::from_ne_bytes(bytes)
}

/// `op` applied lane by lane to the elements of word `current` and `src`.
#[inline(always)]
fn combine_word<E: AccElement>(current: u64, src: &[E], op: Op) -> u64 {
    let size = std::mem::size_of::<E>();
    let mut bytes = current.to_ne_bytes();
    for (k, &v) in src.iter().enumerate() {
        let lane = &mut bytes[k * size..(k + 1) * size];
        let t: E = bytemuck::pod_read_unaligned(lane);
        lane.copy_from_slice(bytemuck::bytes_of(&E::combine(op, t, v)));
    }
    u64::from_ne_bytes(bytes)
}

/// Runs `$body` with `$E` bound to the Rust type of the runtime element type `$ty`.
#[macro_export]
#[doc(hidden)]
macro_rules! with_elem_type {
    ($ty:expr, $E:ident => $body:expr) => {
        match $ty {
            $crate::ElemType::I8 => {
                type $E = i8;
                $body
            }
            $crate::ElemType::I16 => {
                type $E = i16;
                $body
            }
            $crate::ElemType::I32 => {
                type $E = i32;
                $body
            }
            $crate::ElemType::I64 => {
                type $E = i64;
                $body
            }
            $crate::ElemType::U8 => {
                type $E = u8;
                $body
            }
            $crate::ElemType::U16 => {
                type $E = u16;
                $body
            }
            $crate::ElemType::U32 => {
                type $E = u32;
                $body
            }
            $crate::ElemType::U64 => {
                type $E = u64;
                $body
            }
            $crate::ElemType::F32 => {
                type $E = f32;
                $body
            }
            $crate::ElemType::F64 => {
                type $E = f64;
                $body
            }
            $crate::ElemType::C32 => {
                type $E = $crate::Complex32;
                $body
            }
            $crate::ElemType::C64 => {
                type $E = $crate::Complex64;
                $body
            }
            $crate::ElemType::LongDouble => {
                type $E = $crate::LongDouble;
                $body
            }
            $crate::ElemType::LongDoubleComplex => {
                type $E = $crate::LongDoubleComplex;
                $body
            }
            $crate::ElemType::FloatInt => {
                type $E = $crate::FloatInt;
                $body
            }
            $crate::ElemType::DoubleInt => {
                type $E = $crate::DoubleInt;
                $body
            }
            $crate::ElemType::LongInt => {
                type $E = $crate::LongInt;
                $body
            }
            $crate::ElemType::ShortInt => {
                type $E = $crate::ShortInt;
                $body
            }
            $crate::ElemType::TwoInt => {
                type $E = $crate::TwoInt;
                $body
            }
            $crate::ElemType::TwoFloat => {
                type $E = $crate::TwoFloat;
                $body
            }
            $crate::ElemType::TwoDouble => {
                type $E = $crate::TwoDouble;
                $body
            }
            $crate::ElemType::LongDoubleInt => {
                type $E = $crate::LongDoubleInt;
                $body
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `apply_run` gives the serial result and the previous values, for every operation,
    /// narrow types and runs starting at every alignment.
    fn run_matches_serial<E: AccElement + std::fmt::Debug>(make: fn(u8) -> E) {
        for op in Op::ALL {
            if !op.valid_for(E::TYPE) {
                continue;
            }
            for skip in 0..8 {
                for n in [1, 7, 16, 29] {
                    let mut mem: Vec<u64> = vec![0; 8]; // 8-byte aligned backing
                    let elems: &mut [E] = &mut bytemuck::cast_slice_mut(&mut mem)[..];
                    for (k, e) in elems.iter_mut().enumerate() {
                        *e = make(k as u8 % 5 + 1);
                    }
                    let n = n.min(elems.len() - skip);
                    let before: Vec<E> = elems[skip..skip + n].to_vec();
                    let origin: Vec<E> = (0..n).map(|k| make(k as u8 % 3 + 2)).collect();
                    let mut out = vec![make(0); n];
                    // SAFETY: a private buffer, no concurrent access.
                    unsafe { apply_run(elems[skip..].as_mut_ptr(), &origin, Some(&mut out), op) };
                    for k in 0..n {
                        let want = E::combine(op, before[k], origin[k]);
                        assert_eq!(
                            bytemuck::bytes_of(&elems[skip + k]),
                            bytemuck::bytes_of(&want),
                            "{op:?} {:?} skip {skip} n {n} element {k}",
                            E::TYPE
                        );
                        assert_eq!(bytemuck::bytes_of(&out[k]), bytemuck::bytes_of(&before[k]));
                    }
                }
            }
        }
    }

    #[test]
    fn runs_of_narrow_elements_match_the_serial_semantics() {
        run_matches_serial::<i8>(|v| v as i8);
        run_matches_serial::<u8>(|v| v);
        run_matches_serial::<i16>(|v| v as i16 * 300);
        run_matches_serial::<u32>(|v| v as u32 * 70000);
        run_matches_serial::<f32>(|v| v as f32 * 0.5);
        run_matches_serial::<u64>(|v| v as u64);
    }

    /// Word-wide runs and single-element atomics on the same bytes from several threads
    /// lose no update.
    #[test]
    fn word_runs_and_single_atomics_lose_no_update() {
        let mem: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let base = mem.as_ptr() as usize;
        let rounds = 20_000;
        std::thread::scope(|s| {
            for t in 0..3 {
                s.spawn(move || {
                    let p = base as *mut u8;
                    let ones = [1u8; 32];
                    for r in 0..rounds {
                        if t == 0 {
                            // SAFETY: the shared buffer, accessed only atomically.
                            unsafe { apply_run(p, &ones, None, Op::Sum) };
                        } else {
                            // SAFETY: as above.
                            unsafe { u8::apply_op(p.add((r * 7 + t) % 32), Op::Sum, 1) };
                        }
                    }
                });
            }
        });
        // Each byte wraps at 256: compare modulo.
        let bytes: Vec<u8> = mem
            .iter()
            .flat_map(|w| w.load(Relaxed).to_ne_bytes())
            .collect();
        let mut expect = [0u64; 32];
        for b in expect.iter_mut() {
            *b = rounds as u64;
        }
        for t in 1..3 {
            for r in 0..rounds {
                expect[(r * 7 + t) % 32] += 1;
            }
        }
        for (k, &b) in bytes.iter().enumerate() {
            assert_eq!(u64::from(b), expect[k] % 256, "byte {k}");
        }
    }

    /// Stripes taken by `lock_stripes` on one thread, with a server that records whether
    /// that thread served while it held one.
    struct Watch {
        attention: AtomicU64,
        stripes: [AtomicU64; 2],
        thread: std::thread::ThreadId,
        served_while_holding: std::sync::atomic::AtomicBool,
        served_at_all: std::sync::atomic::AtomicBool,
    }

    impl crate::attention::Served for Watch {
        fn attention(&self) -> &AtomicU64 {
            &self.attention
        }
        fn serve(&self) -> bool {
            if std::thread::current().id() == self.thread {
                self.served_at_all.store(true, Relaxed);
                if self.stripes[0].load(Relaxed) == 1 {
                    self.served_while_holding.store(true, Relaxed);
                }
            }
            false
        }
    }

    #[test]
    fn a_thread_holding_a_stripe_serves_nobody_while_it_waits_for_the_next() {
        let watch = std::sync::Arc::new(Watch {
            attention: AtomicU64::new(0),
            // Stripe 1 is held by "another process" (this test) at first.
            stripes: [AtomicU64::new(0), AtomicU64::new(1)],
            thread: std::thread::current().id(),
            served_while_holding: Default::default(),
            served_at_all: Default::default(),
        });
        let server: std::sync::Arc<dyn crate::attention::Served> = watch.clone();
        crate::attention::register(&server);
        let held = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                watch.stripes[1].store(0, Release);
            });
            // Stripe 0 is free and taken at once; the wait is for stripe 1, holding 0.
            lock_stripes(watch.stripes.iter(), &|| false, 0)
        })
        .expect("both stripes");
        crate::attention::unregister(&server);
        assert!(watch.stripes.iter().all(|w| w.load(Relaxed) == 1));
        drop(held);
        assert!(watch.stripes.iter().all(|w| w.load(Relaxed) == 0));
        assert!(
            !watch.served_while_holding.load(Relaxed),
            "served requests while holding stripe 0: one could wait for it forever"
        );
        // The waits for a first stripe do serve (checked with a held first stripe).
        watch.stripes[0].store(1, Relaxed);
        let first = &watch.stripes[0];
        crate::attention::register(&server);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                first.store(0, Release);
            });
            drop(lock_stripes(std::iter::once(first), &|| false, 0).expect("stripe 0"));
        });
        crate::attention::unregister(&server);
        assert!(
            watch.served_at_all.load(Relaxed),
            "a wait holding nothing serves"
        );
    }

    #[test]
    fn an_aborted_job_ends_the_wait_for_a_stripe() {
        let free = AtomicU64::new(0);
        let held = AtomicU64::new(1);
        assert!(matches!(
            lock_stripes([&free, &held].into_iter(), &|| true, 0),
            Err(Error::JobAborted)
        ));
        assert_eq!(free.load(Relaxed), 0, "what it took is released again");
    }

    #[test]
    fn stripes_of_a_run_are_distinct_and_ascending() {
        let of = |first, last, n| stripes_for(first, last, n).collect::<Vec<_>>();
        assert_eq!(of(5, 5, 64), [5]);
        assert_eq!(of(62, 65, 64), [0, 1, 62, 63], "wraps, still ascending");
        assert_eq!(
            of(64 + 60, 64 + 63, 64),
            [60, 61, 62, 63],
            "ends at the last stripe"
        );
        assert_eq!(of(3, 3 + 63, 64), (0..64).collect::<Vec<_>>());
        assert_eq!(of(0, 1000, 8), (0..8).collect::<Vec<_>>());
        // Every granule of the run maps to a listed stripe, each listed once.
        for (first, last) in [(0, 0), (10, 40), (60, 70), (100, 163)] {
            let s = of(first, last, 64);
            assert!(s.windows(2).all(|w| w[0] < w[1]));
            assert!((first..=last).all(|g| s.contains(&(g % 64))));
        }
    }

    #[test]
    fn chunks_cover_a_run_and_name_their_granules() {
        // 8-byte elements from key 56 with 64-byte granules: element 0 in granule 0,
        // element 1 in granule 1.
        assert_eq!(acc_chunk(56, 0, 2, 8, 64), (2, 0, 1));
        let n = 3 * ACC_CHUNK / 8 + 5;
        let mut i = 0;
        let mut chunks = 0;
        while i < n {
            let (j, first, last) = acc_chunk(0, i, n, 8, 64);
            assert!(j > i && j - i <= ACC_CHUNK / 8);
            assert_eq!((first, last), (i * 8 / 64, (j - 1) * 8 / 64));
            i = j;
            chunks += 1;
        }
        assert_eq!(chunks, 4);
        // An element larger than a chunk still moves, alone.
        assert_eq!(acc_chunk(0, 0, 2, ACC_CHUNK * 2, 64).0, 1);
    }

    #[test]
    fn validity_follows_mpi() {
        for op in Op::ALL {
            let pair_op = matches!(op, Op::MinLoc | Op::MaxLoc);
            let any = matches!(op, Op::Replace | Op::NoOp);
            assert_eq!(op.valid_for(ElemType::I32), !pair_op, "{op:?}");
            let float_ok = !pair_op
                && !matches!(
                    op,
                    Op::Band | Op::Bor | Op::Bxor | Op::Land | Op::Lor | Op::Lxor
                );
            assert_eq!(op.valid_for(ElemType::F64), float_ok, "{op:?}");
            assert_eq!(op.valid_for(ElemType::LongDouble), float_ok, "{op:?}");
            let complex_ok = any || matches!(op, Op::Sum | Op::Prod);
            assert_eq!(op.valid_for(ElemType::C64), complex_ok, "{op:?}");
            assert_eq!(op.valid_for(ElemType::DoubleInt), any || pair_op, "{op:?}");
        }
        for ty in ElemType::ALL {
            assert_eq!(
                ty.size(),
                crate::with_elem_type!(ty, E => std::mem::size_of::<E>())
            );
        }
        assert_eq!(ElemType::DoubleInt.size(), 16);
        assert_eq!(ElemType::ShortInt.size(), 8);
        assert_eq!(ElemType::LongDoubleInt.size(), 32);
    }

    #[test]
    fn serial_semantics() {
        assert_eq!(u8::combine(Op::Sum, 250, 10), 4);
        assert_eq!(i16::combine(Op::Prod, -3, 7), -21);
        assert_eq!(i32::combine(Op::Land, 5, 0), 0);
        assert_eq!(i32::combine(Op::Lor, 5, 0), 1);
        assert_eq!(u64::combine(Op::Lxor, 5, 9), 0);
        assert_eq!(i8::combine(Op::Min, -5, 3), -5);
        assert_eq!(f64::combine(Op::Max, 1.5, -2.0), 1.5);
        assert_eq!(f32::combine(Op::NoOp, 1.5, 9.0), 1.5);
    }

    /// Every atomic path agrees with `combine`, and fetch returns the previous value.
    #[test]
    fn atomics_match_the_serial_model() {
        fn check<T: AccElement + std::fmt::Debug>(a: T, b: T) {
            for op in Op::ALL.into_iter().filter(|o| o.valid_for(T::TYPE)) {
                let mut x = a;
                // SAFETY: `x` is a live, aligned local only accessed here.
                let old = unsafe { T::fetch_op(&mut x, op, b) };
                assert_eq!(bytemuck::bytes_of(&old), bytemuck::bytes_of(&a));
                let want = T::combine(op, a, b);
                assert_eq!(bytemuck::bytes_of(&x), bytemuck::bytes_of(&want), "{op:?}");
                let mut y = a;
                // SAFETY: as above.
                unsafe { T::apply_op(&mut y, op, b) };
                assert_eq!(bytemuck::bytes_of(&y), bytemuck::bytes_of(&want), "{op:?}");
            }
            let mut z = a;
            // SAFETY: as above.
            assert_eq!(
                bytemuck::bytes_of(&unsafe { T::compare_swap(&mut z, a, b) }),
                bytemuck::bytes_of(&a)
            );
            assert_eq!(bytemuck::bytes_of(&z), bytemuck::bytes_of(&b));
        }
        check::<i8>(-7, 3);
        check::<i16>(300, -2);
        check::<i32>(123456, 654);
        check::<i64>(-1, i64::MAX);
        check::<u8>(200, 100);
        check::<u16>(1, 0);
        check::<u32>(0xdead, 0xbeef);
        check::<u64>(u64::MAX, 2);
        check::<f32>(1.25, -3.5);
        check::<f64>(2.5, 0.125);
    }
}
