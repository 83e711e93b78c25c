//! The precisions: which tile instruction, which Rust element types.

use std::fmt;
use std::str::FromStr;

use amx_runtime::fp8::{Bf8, Hf8};
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
    /// `bf8 x bf8 -> f32` (E5M2 x E5M2) with TDPBF8PS ([`Bf8Bf8`]; AMX-FP8).
    Bf8Bf8,
    /// `hf8 x hf8 -> f32` (E4M3 x E4M3) with TDPHF8PS ([`Hf8Hf8`]; AMX-FP8).
    Hf8Hf8,
    /// `bf8 x hf8 -> f32` (E5M2 A, E4M3 B) with TDPBHF8PS ([`Bf8Hf8`]; AMX-FP8).
    Bf8Hf8,
    /// `hf8 x bf8 -> f32` (E4M3 A, E5M2 B) with TDPHBF8PS ([`Hf8Bf8`]; AMX-FP8).
    Hf8Bf8,
}

impl PrecisionKind {
    /// Every precision, in the order reports list them.
    pub const ALL: [PrecisionKind; 10] = [
        PrecisionKind::Int8,
        PrecisionKind::U8S8,
        PrecisionKind::S8U8,
        PrecisionKind::U8U8,
        PrecisionKind::Bf16,
        PrecisionKind::Fp16,
        PrecisionKind::Bf8Bf8,
        PrecisionKind::Hf8Hf8,
        PrecisionKind::Bf8Hf8,
        PrecisionKind::Hf8Bf8,
    ];

    /// The name used on command lines and in reports: `int8`, `u8s8`, `s8u8`, `u8u8`, `bf16`,
    /// `fp16`, `bf8`, `hf8`, `bf8hf8` or `hf8bf8` (the FP8 products of one format by its own
    /// name, the mixed ones by A's format then B's).
    pub const fn name(self) -> &'static str {
        match self {
            PrecisionKind::Int8 => "int8",
            PrecisionKind::U8S8 => "u8s8",
            PrecisionKind::S8U8 => "s8u8",
            PrecisionKind::U8U8 => "u8u8",
            PrecisionKind::Bf16 => "bf16",
            PrecisionKind::Fp16 => "fp16",
            PrecisionKind::Bf8Bf8 => "bf8",
            PrecisionKind::Hf8Hf8 => "hf8",
            PrecisionKind::Bf8Hf8 => "bf8hf8",
            PrecisionKind::Hf8Bf8 => "hf8bf8",
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
            PrecisionKind::Bf8Bf8 => "TDPBF8PS",
            PrecisionKind::Hf8Hf8 => "TDPHF8PS",
            PrecisionKind::Bf8Hf8 => "TDPBHF8PS",
            PrecisionKind::Hf8Bf8 => "TDPHBF8PS",
        }
    }

    /// The tile instruction as the runtime's operand rules name it: `None` for the AMX-FP8
    /// products, which [`DotKind`](amx_runtime::rules::DotKind) does not list (their operand
    /// rules are the same; [`instruction`](Self::instruction) names them).
    pub const fn dot_kind(self) -> Option<amx_runtime::rules::DotKind> {
        use amx_runtime::rules::DotKind;
        Some(match self {
            PrecisionKind::Int8 => DotKind::Tdpbssd,
            PrecisionKind::U8S8 => DotKind::Tdpbusd,
            PrecisionKind::S8U8 => DotKind::Tdpbsud,
            PrecisionKind::U8U8 => DotKind::Tdpbuud,
            PrecisionKind::Bf16 => DotKind::Tdpbf16ps,
            PrecisionKind::Fp16 => DotKind::Tdpfp16ps,
            PrecisionKind::Bf8Bf8
            | PrecisionKind::Hf8Hf8
            | PrecisionKind::Bf8Hf8
            | PrecisionKind::Hf8Bf8 => return None,
        })
    }

    /// Whether A and B are 8-bit integers accumulated exactly in `i32` (else 16-bit or 8-bit
    /// floats accumulated in `f32`).
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            PrecisionKind::Int8 | PrecisionKind::U8S8 | PrecisionKind::S8U8 | PrecisionKind::U8U8
        )
    }

    /// Whether A and B are 8-bit floats (bf8 or hf8), the AMX-FP8 products.
    pub const fn is_fp8(self) -> bool {
        matches!(
            self,
            PrecisionKind::Bf8Bf8
                | PrecisionKind::Hf8Hf8
                | PrecisionKind::Bf8Hf8
                | PrecisionKind::Hf8Bf8
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
            _ if self.is_fp8() => amx_runtime::Feature::AmxFp8,
            _ => amx_runtime::Feature::AmxInt8,
        }
    }

    /// Bytes of one element of A and of B.
    pub const fn input_bytes(self) -> usize {
        if self.is_integer() || self.is_fp8() {
            1
        } else {
            2
        }
    }

    /// Elements of K that one 32-bit group of a tile row holds: 4 bytes (int8 or FP8) or 2
    /// bf16 or fp16.
    pub const fn group(self) -> usize {
        4 / self.input_bytes()
    }

    /// Elements of K one tile dot product consumes (one 64-byte row of A): 64 (int8, FP8) or
    /// 32 (bf16, fp16).
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
            "unknown precision {:?}; expected int8, u8s8, s8u8, u8u8, bf16, fp16, bf8, hf8, \
             bf8hf8 or hf8bf8",
            self.0
        )
    }
}

impl std::error::Error for ParsePrecisionError {}

impl FromStr for PrecisionKind {
    type Err = ParsePrecisionError;

    /// Parses `int8` (also `s8s8`, `i8`), `u8s8`, `s8u8`, `u8u8`, `bf16`, `fp16` (also
    /// `f16`), `bf8` (also `bf8bf8`, `e5m2`), `hf8` (also `hf8hf8`, `e4m3`), `bf8hf8` or
    /// `hf8bf8`, in any case.
    fn from_str(text: &str) -> Result<PrecisionKind, ParsePrecisionError> {
        match text.trim().to_ascii_lowercase().as_str() {
            "int8" | "s8s8" | "i8" => Ok(PrecisionKind::Int8),
            "u8s8" => Ok(PrecisionKind::U8S8),
            "s8u8" => Ok(PrecisionKind::S8U8),
            "u8u8" => Ok(PrecisionKind::U8U8),
            "bf16" => Ok(PrecisionKind::Bf16),
            "fp16" | "f16" => Ok(PrecisionKind::Fp16),
            "bf8" | "bf8bf8" | "e5m2" => Ok(PrecisionKind::Bf8Bf8),
            "hf8" | "hf8hf8" | "e4m3" => Ok(PrecisionKind::Hf8Hf8),
            "bf8hf8" => Ok(PrecisionKind::Bf8Hf8),
            "hf8bf8" => Ok(PrecisionKind::Hf8Bf8),
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
/// Sealed: implemented for `i8`, `u8`, [`bf16`], [`f16`](struct@f16), [`Bf8`], [`Hf8`], `i32`
/// and `f32` only.
pub trait Scalar:
    sealed::Sealed + Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static
{
    /// The value as an `f64` (exact for every implementor).
    fn to_f64(self) -> f64;

    /// The value nearest `x`: rounded to nearest (ties to even for the floating types, away
    /// from zero for the integers) and saturated to the type's range; NaN gives 0 for the
    /// integers. [`Bf8`] and [`Hf8`] saturate to their largest finite value (as weights
    /// quantized to FP8 want), an infinity included; NaN stays NaN.
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
    Bf8 => |x| f64::from(x.to_f32()), |y| Bf8::from_f32_saturating(odd_f32(y));
    Hf8 => |x| f64::from(x.to_f32()), |y| Hf8::from_f32_saturating(odd_f32(y));
    i32 => |x| f64::from(x), |y| y.round() as i32;
    f32 => |x| f64::from(x), |y| y as f32;
}

/// `x` rounded to `f32` toward zero, with the lowest bit set when that was inexact ("round to
/// odd"): rounding this to nearest at 22 or fewer significant bits gives what rounding `x`
/// itself would (no double rounding), which the FP8 conversions need. Finite beyond `f32`'s
/// range gives the largest `f32` of its sign, again inexact, so still past every FP8 value.
fn odd_f32(x: f64) -> f32 {
    if x.is_nan() || x.is_infinite() {
        return x as f32;
    }
    let mut r = x as f32;
    if r.is_infinite() {
        r = f32::MAX.copysign(r);
    }
    if f64::from(r) == x {
        return r;
    }
    if f64::from(r).abs() > x.abs() {
        // One step toward zero (r is not zero: |r| > |x| >= 0).
        r = f32::from_bits(r.to_bits() - 1);
    }
    f32::from_bits(r.to_bits() | 1)
}

/// The bytes of a slice of elements, as the tiles see them (little-endian x86-64 memory).
pub(crate) fn bytes_of<T: Scalar>(data: &[T]) -> &[u8] {
    // SAFETY: every `Scalar` (i8, u8, Bf8 and Hf8 = repr(transparent) u8, bf16 and f16 =
    // repr(transparent) u16, i32, f32) is plain data
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
/// instruction that multiplies them. Sealed: [`Int8`], [`U8S8`], [`S8U8`], [`U8U8`], [`Bf16`],
/// [`Fp16`], and the FP8 products [`Bf8Bf8`], [`Hf8Hf8`], [`Bf8Hf8`] and [`Hf8Bf8`].
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

/// `bf8 x bf8 -> f32` (TDPBF8PS): E5M2 A and B ([`Bf8`] values). Each output sums the four
/// exact products of a dword in pairs, into two `f32` lanes, with the tile unit's `f32`
/// rounding (round to nearest even, denormal `f32` results flushed; FP8 denormal inputs are
/// values): see [`reference`](crate::reference) for the bound the results meet. The
/// instruction is AMX-FP8's: on silicon whose CPUID does not report it a call is
/// [`GemmError::Unsupported`](crate::GemmError::Unsupported); the emulator always runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf8Bf8 {}

/// `hf8 x hf8 -> f32` (TDPHF8PS): E4M3 A and B ([`Hf8`] values), otherwise as [`Bf8Bf8`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hf8Hf8 {}

/// `bf8 x hf8 -> f32` (TDPBHF8PS): E5M2 A ([`Bf8`]) and E4M3 B ([`Hf8`]), otherwise as
/// [`Bf8Bf8`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf8Hf8 {}

/// `hf8 x bf8 -> f32` (TDPHBF8PS): E4M3 A ([`Hf8`]) and E5M2 B ([`Bf8`]), otherwise as
/// [`Bf8Bf8`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hf8Bf8 {}

impl sealed::Sealed for Int8 {}
impl sealed::Sealed for U8S8 {}
impl sealed::Sealed for S8U8 {}
impl sealed::Sealed for U8U8 {}
impl sealed::Sealed for Bf16 {}
impl sealed::Sealed for Fp16 {}
impl sealed::Sealed for Bf8Bf8 {}
impl sealed::Sealed for Hf8Hf8 {}
impl sealed::Sealed for Bf8Hf8 {}
impl sealed::Sealed for Hf8Bf8 {}

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
    Bf8Bf8: Bf8, Bf8 => f32, Bf8Bf8;
    Hf8Hf8: Hf8, Hf8 => f32, Hf8Hf8;
    Bf8Hf8: Bf8, Hf8 => f32, Bf8Hf8;
    Hf8Bf8: Hf8, Bf8 => f32, Hf8Bf8;
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
        assert_eq!("E4M3".parse::<PrecisionKind>(), Ok(PrecisionKind::Hf8Hf8));
        assert_eq!("bf8bf8".parse::<PrecisionKind>(), Ok(PrecisionKind::Bf8Bf8));
    }

    #[test]
    fn fp8_geometry_and_feature() {
        for kind in [
            PrecisionKind::Bf8Bf8,
            PrecisionKind::Hf8Hf8,
            PrecisionKind::Bf8Hf8,
            PrecisionKind::Hf8Bf8,
        ] {
            assert!(kind.is_fp8() && !kind.is_integer());
            assert_eq!(
                (kind.input_bytes(), kind.group(), kind.k_per_step()),
                (1, 4, 64)
            );
            assert_eq!(kind.feature(), amx_runtime::Feature::AmxFp8);
            assert_eq!(kind.dot_kind(), None);
        }
    }

    /// Converting from `f64` rounds once, to nearest even at the FP8 format's precision, where
    /// going through a rounded `f32` would round twice.
    #[test]
    fn fp8_from_f64_rounds_once() {
        // Just above the midpoint between 1 and 1.125 (hf8) or 1.25 (bf8) by less than half
        // an f32 ulp: an `f32` rounding lands on the midpoint, which ties to even (down).
        let above = |mid: f64| mid + 2f64.powi(-30);
        assert_eq!(Hf8::from_f64(above(1.0625)).to_f64(), 1.125);
        assert_eq!(Bf8::from_f64(above(1.125)).to_f64(), 1.25);
        assert_eq!(Hf8::from_f64(1.0625).to_f64(), 1.0);
        assert_eq!(Hf8::from_f64(-1.0e300).to_f64(), -448.0);
        assert_eq!(Bf8::from_f64(f64::INFINITY).to_f64(), 57344.0);
        assert!(Bf8::from_f64(f64::NAN).to_f64().is_nan());
        assert_eq!(Hf8::from_f64(2f64.powi(-9)).to_bits(), 0x01);
        for x in [0.3, -0.7, 5.5e-3, 100.0, 2f64.powi(-200)] {
            assert_eq!(Hf8::from_f64(x), Hf8::from_f32(x as f32), "{x}");
            assert_eq!(Bf8::from_f64(x), Bf8::from_f32(x as f32), "{x}");
        }
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
