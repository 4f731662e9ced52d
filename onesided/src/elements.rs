//! Element types of accumulates beyond Rust's primitives, as MPI defines them: complex
//! numbers, the x87 `long double` of C on x86-64, and the value-index pairs that
//! `MPI_MINLOC` and `MPI_MAXLOC` combine ([MPI-4.1] §6.9.4).
//!
//! No CPU has an atomic instruction for an update of these, so every accumulate on them —
//! on mapped memory too — goes through the window's lock stripes (`rma::accumulate`): each
//! element is still updated atomically with respect to every other accumulate on it. On a
//! window across nodes the stripes are taken through the window's control plane (network
//! atomics on the target's words) and the elements read and written through the network,
//! by this node's processes too — or, to another node that the wire reaches, sent as one
//! message that the target applies under the stripes itself. Their layouts are C's: `float _Complex`, `double
//! _Complex`, `long double` (80 bits in 16 bytes), the C pair structs with their padding
//! (`MPI_DOUBLE_INT` is `{double; int;}`, 16 bytes).

use bytemuck::{Pod, Zeroable};

/// `float _Complex` (`MPI_C_FLOAT_COMPLEX`, Fortran `COMPLEX`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Pod, Zeroable)]
pub struct Complex32 {
    /// Real part.
    pub re: f32,
    /// Imaginary part.
    pub im: f32,
}

/// `double _Complex` (`MPI_C_DOUBLE_COMPLEX`, Fortran `DOUBLE COMPLEX`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Pod, Zeroable)]
pub struct Complex64 {
    /// Real part.
    pub re: f64,
    /// Imaginary part.
    pub im: f64,
}

/// C's `long double` on x86-64 (`MPI_LONG_DOUBLE`): an x87 80-bit extended-precision value
/// in 16 bytes (the last 6 are padding). Arithmetic uses the x87 unit, as C does.
///
/// ```
/// use onesided::LongDouble;
/// let x = LongDouble::from_f64(1.5);
/// assert_eq!(x.to_f64(), 1.5);
/// ```
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub struct LongDouble {
    /// The value's bytes as C stores them.
    pub bits: [u8; 16],
}

/// `long double _Complex` (`MPI_C_LONG_DOUBLE_COMPLEX`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Pod, Zeroable)]
pub struct LongDoubleComplex {
    /// Real part.
    pub re: LongDouble,
    /// Imaginary part.
    pub im: LongDouble,
}

#[cfg(target_arch = "x86_64")]
mod x87 {
    //! The x87 operations `long double` needs (the only place of this crate that uses the
    //! unit): loads and stores of 80-bit values in memory, add, multiply, compare.
    use std::arch::asm;

    /// One binary operation of the x87 unit on two 80-bit values in memory: `$name(a, b)`
    /// is `a op b`; the 6 padding bytes are kept from `a`, as a C store of the result
    /// leaves them.
    macro_rules! binop {
        ($(#[$doc:meta])* $name:ident, $insn:literal) => {
            $(#[$doc])*
            pub(super) fn $name(a: &[u8; 16], b: &[u8; 16]) -> [u8; 16] {
                let mut out = [0u8; 16];
                // SAFETY: reads 10 bytes at each input and writes 10 at `out`, all 16-byte
                // arrays; the two x87 registers used are declared clobbered and left empty.
                unsafe {
                    asm!(
                        "fld tbyte ptr [{a}]",
                        "fld tbyte ptr [{b}]",
                        $insn,
                        "fstp tbyte ptr [{o}]",
                        a = in(reg) a.as_ptr(),
                        b = in(reg) b.as_ptr(),
                        o = in(reg) out.as_mut_ptr(),
                        out("st(0)") _,
                        out("st(1)") _,
                        options(nostack),
                    );
                }
                out[10..].copy_from_slice(&a[10..]);
                out
            }
        };
    }

    binop!(
        /// `a + b`.
        add,
        "faddp st(1), st"
    );
    binop!(
        /// `a * b`.
        mul,
        "fmulp st(1), st"
    );
    binop!(
        /// `a - b`.
        sub,
        "fsubp st(1), st"
    );

    /// The order of `a` and `b` (`None`: either is a NaN).
    pub(super) fn compare(a: &[u8; 16], b: &[u8; 16]) -> Option<std::cmp::Ordering> {
        let (below, equal, unordered): (u8, u8, u8);
        // SAFETY: reads 10 bytes at each input; both registers are popped again.
        unsafe {
            asm!(
                "fld tbyte ptr [{b}]",
                "fld tbyte ptr [{a}]",
                "fucomip st, st(1)",
                "fstp st(0)",
                "setb {lt}",
                "sete {eq}",
                "setp {un}",
                a = in(reg) a.as_ptr(),
                b = in(reg) b.as_ptr(),
                lt = out(reg_byte) below,
                eq = out(reg_byte) equal,
                un = out(reg_byte) unordered,
                out("st(0)") _,
                out("st(1)") _,
                options(nostack),
            );
        }
        match (unordered != 0, below != 0, equal != 0) {
            (true, _, _) => None,
            (_, true, _) => Some(std::cmp::Ordering::Less),
            (_, _, true) => Some(std::cmp::Ordering::Equal),
            _ => Some(std::cmp::Ordering::Greater),
        }
    }

    pub(super) fn from_f64(x: f64) -> [u8; 16] {
        let mut out = [0u8; 16];
        // SAFETY: reads the 8 bytes of `x`, writes 10 of `out`.
        unsafe {
            asm!(
                "fld qword ptr [{x}]",
                "fstp tbyte ptr [{o}]",
                x = in(reg) &x,
                o = in(reg) out.as_mut_ptr(),
                out("st(0)") _,
                options(nostack),
            );
        }
        out
    }

    pub(super) fn to_f64(a: &[u8; 16]) -> f64 {
        let mut x = 0f64;
        // SAFETY: reads 10 bytes of `a`, writes the 8 of `x`.
        unsafe {
            asm!(
                "fld tbyte ptr [{a}]",
                "fstp qword ptr [{x}]",
                a = in(reg) a.as_ptr(),
                x = in(reg) &mut x,
                out("st(0)") _,
                options(nostack),
            );
        }
        x
    }
}

impl LongDouble {
    /// Whether this build can compute with `long double` (x86-64: the x87 unit).
    pub const ARITHMETIC: bool = cfg!(target_arch = "x86_64");

    /// The value nearest `x` (exact: every `f64` is a `long double`).
    #[cfg(target_arch = "x86_64")]
    pub fn from_f64(x: f64) -> Self {
        LongDouble {
            bits: x87::from_f64(x),
        }
    }

    /// This value rounded to `f64`.
    #[cfg(target_arch = "x86_64")]
    pub fn to_f64(self) -> f64 {
        x87::to_f64(&self.bits)
    }

    #[cfg(target_arch = "x86_64")]
    pub(crate) fn add(self, o: Self) -> Self {
        LongDouble {
            bits: x87::add(&self.bits, &o.bits),
        }
    }

    #[cfg(target_arch = "x86_64")]
    pub(crate) fn mul(self, o: Self) -> Self {
        LongDouble {
            bits: x87::mul(&self.bits, &o.bits),
        }
    }

    #[cfg(target_arch = "x86_64")]
    pub(crate) fn sub(self, o: Self) -> Self {
        LongDouble {
            bits: x87::sub(&self.bits, &o.bits),
        }
    }

    // Without the x87 unit `long double` accumulates allow only replace and no_op
    // (`Op::valid_for`): these are never called.
    #[cfg(not(target_arch = "x86_64"))]
    fn add(self, _: Self) -> Self {
        self
    }
    #[cfg(not(target_arch = "x86_64"))]
    fn mul(self, _: Self) -> Self {
        self
    }
    #[cfg(not(target_arch = "x86_64"))]
    fn sub(self, _: Self) -> Self {
        self
    }
}

impl PartialEq for LongDouble {
    fn eq(&self, other: &Self) -> bool {
        self.partial_cmp(other) == Some(std::cmp::Ordering::Equal)
    }
}

impl PartialOrd for LongDouble {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        #[cfg(target_arch = "x86_64")]
        return x87::compare(&self.bits, &other.bits);
        #[cfg(not(target_arch = "x86_64"))]
        return self.bits[..10].partial_cmp(&other.bits[..10]);
    }
}

/// A value-index pair of `MPI_MINLOC`/`MPI_MAXLOC`.
pub trait ValueIndex: Copy {
    /// The value compared.
    type Value: PartialOrd + Copy;
    /// The index kept with it.
    type Index: PartialOrd + Copy;
    /// The pair's value.
    fn value(&self) -> Self::Value;
    /// The pair's index.
    fn index(&self) -> Self::Index;
}

macro_rules! pair_type {
    ($(#[$doc:meta])* $name:ident { $($field:ident : $t:ty),* } value: $v:ty, index: $i:ty) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Pod, Zeroable)]
        pub struct $name {
            $($field: $t),*
        }

        impl $name {
            /// The pair (`value`, `index`).
            pub fn new(value: $v, index: $i) -> Self {
                let mut pair = Self::zeroed();
                pair.value = value;
                pair.index = index;
                pair
            }
        }

        impl ValueIndex for $name {
            type Value = $v;
            type Index = $i;
            fn value(&self) -> $v {
                self.value
            }
            fn index(&self) -> $i {
                self.index
            }
        }
    };
}

pair_type!(
    /// `MPI_FLOAT_INT`: `{float; int;}`.
    FloatInt { value: f32, index: i32 } value: f32, index: i32
);
pair_type!(
    /// `MPI_DOUBLE_INT`: `{double; int;}` (16 bytes, 12 of them data).
    DoubleInt { value: f64, index: i32, pad: u32 } value: f64, index: i32
);
pair_type!(
    /// `MPI_LONG_INT`: `{long; int;}` (16 bytes, 12 of them data).
    LongInt { value: i64, index: i32, pad: u32 } value: i64, index: i32
);
pair_type!(
    /// `MPI_SHORT_INT`: `{short; int;}` (8 bytes, 6 of them data).
    ShortInt { value: i16, pad: u16, index: i32 } value: i16, index: i32
);
pair_type!(
    /// `MPI_2INT` and Fortran's `MPI_2INTEGER`: two `int`s.
    TwoInt { value: i32, index: i32 } value: i32, index: i32
);
pair_type!(
    /// Fortran's `MPI_2REAL`: two `REAL`s.
    TwoFloat { value: f32, index: f32 } value: f32, index: f32
);
pair_type!(
    /// Fortran's `MPI_2DOUBLE_PRECISION`: two `DOUBLE PRECISION`s.
    TwoDouble { value: f64, index: f64 } value: f64, index: f64
);
pair_type!(
    /// `MPI_LONG_DOUBLE_INT`: `{long double; int;}` (32 bytes, 20 of them data).
    LongDoubleInt { value: LongDouble, index: i32, pad: [u32; 3] } value: LongDouble, index: i32
);

/// MINLOC (`max`: MAXLOC) of target pair `t` and origin pair `o` ([MPI-4.1] §6.9.4): the
/// lower (higher) value with its index; of equal values, the lower index.
pub(crate) fn loc<P: ValueIndex>(t: P, o: P, max: bool) -> P {
    let (u, v) = (t.value(), o.value());
    let o_wins = if max { v > u } else { v < u };
    if o_wins || (u == v && o.index() < t.index()) {
        o
    } else {
        t
    }
}

/// Sum and product of complex numbers (C's arithmetic, no special cases for infinities).
macro_rules! complex_arith {
    ($t:ty, $add:expr, $sub:expr, $mul:expr) => {
        impl $t {
            /// `a + b`.
            pub(crate) fn sum(a: Self, b: Self) -> Self {
                let add = $add;
                Self {
                    re: add(a.re, b.re),
                    im: add(a.im, b.im),
                }
            }

            /// `a * b`.
            pub(crate) fn prod(a: Self, b: Self) -> Self {
                let (add, sub, mul) = ($add, $sub, $mul);
                Self {
                    re: sub(mul(a.re, b.re), mul(a.im, b.im)),
                    im: add(mul(a.re, b.im), mul(a.im, b.re)),
                }
            }
        }
    };
}

complex_arith!(
    Complex32,
    |x: f32, y: f32| x + y,
    |x: f32, y: f32| x - y,
    |x: f32, y: f32| x * y
);
complex_arith!(
    Complex64,
    |x: f64, y: f64| x + y,
    |x: f64, y: f64| x - y,
    |x: f64, y: f64| x * y
);
complex_arith!(
    LongDoubleComplex,
    |x: LongDouble, y: LongDouble| x.add(y),
    |x: LongDouble, y: LongDouble| x.sub(y),
    |x: LongDouble, y: LongDouble| x.mul(y)
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minloc_and_maxloc_follow_the_standard() {
        let p = DoubleInt::new;
        assert_eq!(loc(p(3.0, 5), p(2.0, 9), false).index, 9);
        assert_eq!(loc(p(2.0, 5), p(2.0, 1), false).index, 1);
        assert_eq!(loc(p(2.0, 1), p(2.0, 5), false).index, 1);
        assert_eq!(loc(p(3.0, 5), p(2.0, 9), true).index, 5);
        assert_eq!(loc(p(3.0, 5), p(3.0, 2), true).index, 2);
        let (t, o) = (TwoFloat::new(1.0, 4.0), TwoFloat::new(1.0, 3.0));
        assert_eq!(loc(t, o, true).index, 3.0);
    }

    #[test]
    fn complex_products() {
        let a = Complex64 { re: 1.0, im: 2.0 };
        let b = Complex64 { re: 3.0, im: -1.0 };
        assert_eq!(Complex64::prod(a, b), Complex64 { re: 5.0, im: 5.0 });
        assert_eq!(
            Complex32::sum(
                Complex32 { re: 1.0, im: 1.0 },
                Complex32 { re: 0.5, im: -2.0 }
            ),
            Complex32 { re: 1.5, im: -1.0 }
        );
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn long_double_arithmetic_keeps_extended_precision() {
        let one = LongDouble::from_f64(1.0);
        let tiny = LongDouble::from_f64(f64::EPSILON / 4.0); // below f64's resolution at 1
        let sum = one.add(tiny);
        assert!(sum > one, "an x87 sum keeps what f64 would round away");
        assert_eq!(sum.to_f64(), 1.0);
        assert_eq!(sum.sub(one).to_f64(), f64::EPSILON / 4.0);
        let p = LongDouble::from_f64(1.5).mul(LongDouble::from_f64(-4.0));
        assert_eq!(p.to_f64(), -6.0);
        let z = LongDoubleComplex::prod(
            LongDoubleComplex { re: one, im: one },
            LongDoubleComplex {
                re: one,
                im: LongDouble::from_f64(-1.0),
            },
        );
        assert_eq!((z.re.to_f64(), z.im.to_f64()), (2.0, 0.0));
    }
}
