//! The three precisions: which tile instruction, which Rust element types.

use std::fmt;
use std::str::FromStr;

use half::bf16;

/// Bytes in one tile row: one k-step of A for one output row.
pub(crate) const ROW_BYTES: usize = 64;

/// A precision picked at run time (for reports and command lines): the run-time twin of the
/// [`Precision`] marker types. A precision is a pairing of operand types and an instruction
/// (`u8 x i8 -> i32` is one), not the element type of one operand: that is
/// [`amx_runtime::ElemType`]. Non-exhaustive: a precision the tile unit gains is a minor
/// release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PrecisionKind {
    /// `i8 x i8 -> i32` with TDPBSSD ([`Int8`]).
    Int8,
    /// `u8 x i8 -> i32` with TDPBUSD ([`U8S8`]).
    U8S8,
    /// `bf16 x bf16 -> f32` with TDPBF16PS ([`Bf16`]).
    Bf16,
}

impl PrecisionKind {
    /// Every precision, in the order reports list them.
    pub const ALL: [PrecisionKind; 3] = [
        PrecisionKind::Int8,
        PrecisionKind::U8S8,
        PrecisionKind::Bf16,
    ];

    /// The name used on command lines and in reports: `int8`, `u8s8` or `bf16`.
    pub const fn name(self) -> &'static str {
        match self {
            PrecisionKind::Int8 => "int8",
            PrecisionKind::U8S8 => "u8s8",
            PrecisionKind::Bf16 => "bf16",
        }
    }

    /// The tile instruction, upper case as in the manual.
    pub const fn instruction(self) -> &'static str {
        match self {
            PrecisionKind::Int8 => "TDPBSSD",
            PrecisionKind::U8S8 => "TDPBUSD",
            PrecisionKind::Bf16 => "TDPBF16PS",
        }
    }

    /// The tile instruction as the runtime names it.
    pub const fn dot_kind(self) -> amx_runtime::rules::DotKind {
        use amx_runtime::rules::DotKind;
        match self {
            PrecisionKind::Int8 => DotKind::Tdpbssd,
            PrecisionKind::U8S8 => DotKind::Tdpbusd,
            PrecisionKind::Bf16 => DotKind::Tdpbf16ps,
        }
    }

    /// Bytes of one element of A and of B.
    pub const fn input_bytes(self) -> usize {
        match self {
            PrecisionKind::Int8 | PrecisionKind::U8S8 => 1,
            PrecisionKind::Bf16 => 2,
        }
    }

    /// Elements of K that one 32-bit group of a tile row holds: 4 bytes or 2 bf16.
    pub const fn group(self) -> usize {
        4 / self.input_bytes()
    }

    /// Elements of K one tile dot product consumes (one 64-byte row of A): 64 or 32.
    pub const fn k_per_step(self) -> usize {
        ROW_BYTES / self.input_bytes()
    }

    /// Arithmetic operations (a multiply and an add each) of one full 16 x 16 tile dot product.
    pub const fn ops_per_tdp(self) -> u64 {
        2 * 16 * 16 * self.k_per_step() as u64
    }
}

impl fmt::Display for PrecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The text was none of `int8`, `u8s8`, `bf16`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsePrecisionError(pub String);

impl fmt::Display for ParsePrecisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown precision {:?}; expected int8, u8s8 or bf16",
            self.0
        )
    }
}

impl std::error::Error for ParsePrecisionError {}

impl FromStr for PrecisionKind {
    type Err = ParsePrecisionError;

    /// Parses `int8` (also `s8s8`, `i8`), `u8s8` or `bf16`, in any case.
    fn from_str(text: &str) -> Result<PrecisionKind, ParsePrecisionError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "int8" | "s8s8" | "i8" => Ok(PrecisionKind::Int8),
            "u8s8" => Ok(PrecisionKind::U8S8),
            "bf16" => Ok(PrecisionKind::Bf16),
            _ => Err(ParsePrecisionError(text.to_owned())),
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// The Rust type of the entries of A, B or C: plain data whose bytes the tiles read and write
/// directly (what `amx_runtime::typed::Element::Scalar` is for a typed tile).
///
/// Sealed: implemented for `i8`, `u8`, [`bf16`], `i32` and `f32` only.
pub trait Scalar:
    sealed::Sealed + Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static
{
    /// The value as an `f64` (exact for every implementor).
    fn to_f64(self) -> f64;

    /// The value nearest `x`: rounded to nearest (ties to even for the floating types, away
    /// from zero for the integers) and saturated to the type's range; NaN gives 0 for the
    /// integers.
    fn from_f64(x: f64) -> Self;
}

macro_rules! element {
    ($($t:ty => |$x:ident| $to:expr, |$y:ident| $from:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Scalar for $t {
            fn to_f64(self) -> f64 {
                let $x = self;
                $to
            }
            fn from_f64($y: f64) -> Self {
                $from
            }
        }
    )*};
}

element! {
    i8 => |x| f64::from(x), |y| y.round() as i8;
    u8 => |x| f64::from(x), |y| y.round() as u8;
    bf16 => |x| f64::from(x.to_f32()), |y| bf16::from_f64(y);
    i32 => |x| f64::from(x), |y| y.round() as i32;
    f32 => |x| f64::from(x), |y| y as f32;
}

/// The bytes of a slice of elements, as the tiles see them (little-endian x86-64 memory).
pub(crate) fn bytes_of<T: Scalar>(data: &[T]) -> &[u8] {
    // SAFETY: every `Scalar` (i8, u8, bf16 = repr(transparent) u16, i32, f32) is plain data
    // with no padding and no invalid byte patterns to read; the length is the slice's size in
    // bytes and the lifetime is the borrow's.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// The bytes of a mutable slice of elements.
pub(crate) fn bytes_of_mut<T: Scalar>(data: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `bytes_of`; in addition every byte pattern is a valid value of every
    // `Scalar` (integers, and floats whose every bit pattern is some value), so writes through
    // the byte view cannot create an invalid value. The unique borrow is carried over.
    unsafe {
        std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(data))
    }
}

/// One of the three GEMM precisions, as a type: the element types of A, B and C and the tile
/// instruction that multiplies them. Sealed: [`Int8`], [`U8S8`] and [`Bf16`].
pub trait Precision: sealed::Sealed + Copy + fmt::Debug + Send + Sync + 'static {
    /// Elements of A (M x K, row-major).
    type A: Scalar;
    /// Elements of B (K x N before packing).
    type B: Scalar;
    /// Elements of C (M x N, row-major), the accumulator type.
    type C: Scalar;
    /// The run-time name of this precision.
    const KIND: PrecisionKind;
}

/// `i8 x i8 -> i32` (TDPBSSD), 32-bit wraparound accumulation as on the silicon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Int8 {}

/// `u8 x i8 -> i32` (TDPBUSD): unsigned activations times signed weights, the usual quantized
/// inference pairing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum U8S8 {}

/// `bf16 x bf16 -> f32` (TDPBF16PS), with the tile unit's rounding (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf16 {}

impl sealed::Sealed for Int8 {}
impl sealed::Sealed for U8S8 {}
impl sealed::Sealed for Bf16 {}

impl Precision for Int8 {
    type A = i8;
    type B = i8;
    type C = i32;
    const KIND: PrecisionKind = PrecisionKind::Int8;
}

impl Precision for U8S8 {
    type A = u8;
    type B = i8;
    type C = i32;
    const KIND: PrecisionKind = PrecisionKind::U8S8;
}

impl Precision for Bf16 {
    type A = bf16;
    type B = bf16;
    type C = f32;
    const KIND: PrecisionKind = PrecisionKind::Bf16;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_round_trip() {
        for d in PrecisionKind::ALL {
            assert_eq!(d.name().parse::<PrecisionKind>(), Ok(d));
        }
        assert!("fp8".parse::<PrecisionKind>().is_err());
    }

    #[test]
    fn tile_geometry() {
        assert_eq!(PrecisionKind::Int8.k_per_step(), 64);
        assert_eq!(PrecisionKind::Bf16.k_per_step(), 32);
        assert_eq!(PrecisionKind::Bf16.group(), 2);
        assert_eq!(PrecisionKind::U8S8.ops_per_tdp(), 32768);
    }

    #[test]
    fn bytes_are_little_endian() {
        assert_eq!(bytes_of(&[0x0102_0304i32]), &[4, 3, 2, 1]);
        assert_eq!(bytes_of(&[bf16::from_bits(0x3f80)]), &[0x80, 0x3f]);
    }
}
