//! The three precisions: which tile instruction, which Rust element types.

use std::fmt;
use std::str::FromStr;

use half::{bf16, f16};

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
    /// `i8 x u8 -> i32` with TDPBSUD ([`S8U8`]).
    S8U8,
    /// `u8 x u8 -> i32` with TDPBUUD ([`U8U8`]).
    U8U8,
    /// `bf16 x bf16 -> f32` with TDPBF16PS ([`Bf16`]).
    Bf16,
    /// `f16 x f16 -> f32` with TDPFP16PS ([`Fp16`]; AMX-FP16, Granite Rapids and later).
    Fp16,
}

impl PrecisionKind {
    /// Every precision, in the order reports list them.
    pub const ALL: [PrecisionKind; 6] = [
        PrecisionKind::Int8,
        PrecisionKind::U8S8,
        PrecisionKind::S8U8,
        PrecisionKind::U8U8,
        PrecisionKind::Bf16,
        PrecisionKind::Fp16,
    ];

    /// The name used on command lines and in reports: `int8`, `u8s8`, `s8u8`, `u8u8`, `bf16`
    /// or `fp16`.
    pub const fn name(self) -> &'static str {
        match self {
            PrecisionKind::Int8 => "int8",
            PrecisionKind::U8S8 => "u8s8",
            PrecisionKind::S8U8 => "s8u8",
            PrecisionKind::U8U8 => "u8u8",
            PrecisionKind::Bf16 => "bf16",
            PrecisionKind::Fp16 => "fp16",
        }
    }

    /// The tile instruction, upper case as in the manual.
    pub const fn instruction(self) -> &'static str {
        match self {
            PrecisionKind::Int8 => "TDPBSSD",
            PrecisionKind::U8S8 => "TDPBUSD",
            PrecisionKind::S8U8 => "TDPBSUD",
            PrecisionKind::U8U8 => "TDPBUUD",
            PrecisionKind::Bf16 => "TDPBF16PS",
            PrecisionKind::Fp16 => "TDPFP16PS",
        }
    }

    /// The tile instruction as the runtime names it.
    pub const fn dot_kind(self) -> amx_runtime::rules::DotKind {
        use amx_runtime::rules::DotKind;
        match self {
            PrecisionKind::Int8 => DotKind::Tdpbssd,
            PrecisionKind::U8S8 => DotKind::Tdpbusd,
            PrecisionKind::S8U8 => DotKind::Tdpbsud,
            PrecisionKind::U8U8 => DotKind::Tdpbuud,
            PrecisionKind::Bf16 => DotKind::Tdpbf16ps,
            PrecisionKind::Fp16 => DotKind::Tdpfp16ps,
        }
    }

    /// Whether A and B are 8-bit integers accumulated exactly in `i32` (else 16-bit floats
    /// accumulated in `f32`).
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            PrecisionKind::Int8 | PrecisionKind::U8S8 | PrecisionKind::S8U8 | PrecisionKind::U8U8
        )
    }

    /// Whether B's elements are unsigned bytes (TDPBSUD, TDPBUUD): what its column sums add.
    pub(crate) const fn unsigned_b(self) -> bool {
        matches!(self, PrecisionKind::S8U8 | PrecisionKind::U8U8)
    }

    /// The CPU feature of the precision's instruction.
    pub const fn feature(self) -> amx_runtime::Feature {
        match self {
            PrecisionKind::Bf16 => amx_runtime::Feature::AmxBf16,
            PrecisionKind::Fp16 => amx_runtime::Feature::AmxFp16,
            _ => amx_runtime::Feature::AmxInt8,
        }
    }

    /// Bytes of one element of A and of B.
    pub const fn input_bytes(self) -> usize {
        if self.is_integer() {
            1
        } else {
            2
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

/// The text names no precision (see [`PrecisionKind::name`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsePrecisionError(pub String);

impl fmt::Display for ParsePrecisionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown precision {:?}; expected int8, u8s8, s8u8, u8u8, bf16 or fp16",
            self.0
        )
    }
}

impl std::error::Error for ParsePrecisionError {}

impl FromStr for PrecisionKind {
    type Err = ParsePrecisionError;

    /// Parses `int8` (also `s8s8`, `i8`), `u8s8`, `s8u8`, `u8u8`, `bf16` or `fp16` (also
    /// `f16`), in any case.
    fn from_str(text: &str) -> Result<PrecisionKind, ParsePrecisionError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "int8" | "s8s8" | "i8" => Ok(PrecisionKind::Int8),
            "u8s8" => Ok(PrecisionKind::U8S8),
            "s8u8" => Ok(PrecisionKind::S8U8),
            "u8u8" => Ok(PrecisionKind::U8U8),
            "bf16" => Ok(PrecisionKind::Bf16),
            "fp16" | "f16" => Ok(PrecisionKind::Fp16),
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
/// Sealed: implemented for `i8`, `u8`, [`bf16`], [`f16`](struct@f16), `i32` and `f32` only.
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
    f16 => |x| f64::from(x.to_f32()), |y| f16::from_f64(y);
    i32 => |x| f64::from(x), |y| y.round() as i32;
    f32 => |x| f64::from(x), |y| y as f32;
}

/// The bytes of a slice of elements, as the tiles see them (little-endian x86-64 memory).
pub(crate) fn bytes_of<T: Scalar>(data: &[T]) -> &[u8] {
    // SAFETY: every `Scalar` (i8, u8, bf16 and f16 = repr(transparent) u16, i32, f32) is plain data
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

/// One of the GEMM precisions, as a type: the element types of A, B and C and the tile
/// instruction that multiplies them. Sealed: [`Int8`], [`U8S8`], [`S8U8`], [`U8U8`], [`Bf16`]
/// and [`Fp16`].
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

/// `i8 x u8 -> i32` (TDPBSUD): signed activations times unsigned weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum S8U8 {}

/// `u8 x u8 -> i32` (TDPBUUD): unsigned activations and weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum U8U8 {}

/// `bf16 x bf16 -> f32` (TDPBF16PS), with the tile unit's rounding (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf16 {}

/// `f16 x f16 -> f32` (TDPFP16PS), with the tile unit's rounding (that of [`Bf16`], with fp16
/// denormal inputs honoured). The instruction is AMX-FP16's (Granite Rapids and later): on
/// silicon whose CPUID does not report it a call is
/// [`GemmError::Unsupported`](crate::GemmError::Unsupported); the emulator always runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp16 {}

impl sealed::Sealed for Int8 {}
impl sealed::Sealed for U8S8 {}
impl sealed::Sealed for S8U8 {}
impl sealed::Sealed for U8U8 {}
impl sealed::Sealed for Bf16 {}
impl sealed::Sealed for Fp16 {}

macro_rules! precision {
    ($($t:ident: $a:ty, $b:ty => $c:ty, $kind:ident;)*) => {$(
        impl Precision for $t {
            type A = $a;
            type B = $b;
            type C = $c;
            const KIND: PrecisionKind = PrecisionKind::$kind;
        }
    )*};
}

precision! {
    Int8: i8, i8 => i32, Int8;
    U8S8: u8, i8 => i32, U8S8;
    S8U8: i8, u8 => i32, S8U8;
    U8U8: u8, u8 => i32, U8U8;
    Bf16: bf16, bf16 => f32, Bf16;
    Fp16: f16, f16 => f32, Fp16;
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
