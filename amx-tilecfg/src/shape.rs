//! Tile shapes and the element types a tile may hold.

use core::fmt;
use core::str::FromStr;

/// The shape of one tile: `rows` rows of `colsb` bytes each.
///
/// A shape of `0 x 0` means the tile is unused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TileShape {
    /// Number of rows (byte `48 + t` of the image).
    pub rows: u8,
    /// Bytes per row (the little-endian word at `16 + 2t` of the image).
    pub colsb: u16,
}

impl TileShape {
    /// A shape of `rows` rows by `colsb` bytes per row.
    pub const fn new(rows: u8, colsb: u16) -> Self {
        TileShape { rows, colsb }
    }

    /// Bytes of tile data this shape covers (`rows * colsb`).
    pub const fn bytes(self) -> u32 {
        self.rows as u32 * self.colsb as u32
    }

    /// Whether this is the unused shape `0 x 0`.
    pub const fn is_unused(self) -> bool {
        self.rows == 0 && self.colsb == 0
    }
}

impl fmt::Display for TileShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.colsb)
    }
}

/// The element types a tile row can be read as, by the DSL and the typed tile handles.
///
/// Exhaustive on purpose, as [`DotKind`](crate::DotKind) is: each type needs its typed
/// handles, its `Holds` slices and its dot products, and the macro maps it without a wildcard,
/// so a new one cannot be half-supported. It comes with a new instruction, in a breaking
/// release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum ElemType {
    /// Signed 8-bit integer (TDPBSSD/TDPBSUD operand).
    I8,
    /// Unsigned 8-bit integer (TDPBUSD/TDPBUUD operand).
    U8,
    /// bfloat16 (TDPBF16PS operand).
    Bf16,
    /// IEEE binary16 (TDPFP16PS operand).
    F16,
    /// Signed 32-bit integer (the TDPB* accumulator).
    I32,
    /// IEEE binary32 (the accumulator of the floating-point dot products).
    F32,
    /// BF8, Intel's name for the 8-bit float E5M2 (1 sign, 5 exponent, 2 fraction bits, bias
    /// 15, with infinities and NaNs): an AMX-FP8 operand.
    Bf8,
    /// HF8, Intel's name for the 8-bit float E4M3 (1 sign, 4 exponent, 3 fraction bits, bias
    /// 7, no infinities, a NaN only at `S.1111.111`, largest finite 448): an AMX-FP8 operand.
    Hf8,
}

impl ElemType {
    /// Every element type, in the order the DSL documents them.
    pub const ALL: [ElemType; 8] = [
        ElemType::I8,
        ElemType::U8,
        ElemType::Bf16,
        ElemType::F16,
        ElemType::I32,
        ElemType::F32,
        ElemType::Bf8,
        ElemType::Hf8,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> u16 {
        match self {
            ElemType::I8 | ElemType::U8 | ElemType::Bf8 | ElemType::Hf8 => 1,
            ElemType::Bf16 | ElemType::F16 => 2,
            ElemType::I32 | ElemType::F32 => 4,
        }
    }

    /// The name the DSL uses for this type (`i8`, `u8`, `bf16`, `f16`, `i32`, `f32`, `bf8`,
    /// `hf8`).
    pub const fn name(self) -> &'static str {
        match self {
            ElemType::I8 => "i8",
            ElemType::U8 => "u8",
            ElemType::Bf16 => "bf16",
            ElemType::F16 => "f16",
            ElemType::I32 => "i32",
            ElemType::F32 => "f32",
            ElemType::Bf8 => "bf8",
            ElemType::Hf8 => "hf8",
        }
    }

    /// The element type named `name` in the DSL, if any. Names are exact: lower case, no
    /// surrounding spaces. [`str::parse`] does the same and gives a [`ParseElemTypeError`]
    /// instead of `None`.
    pub fn from_name(name: &str) -> Option<ElemType> {
        ElemType::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses the DSL's name of an element type, exactly as [`ElemType::from_name`] does.
///
/// ```
/// use amx_tilecfg::ElemType;
///
/// assert_eq!("bf16".parse::<ElemType>(), Ok(ElemType::Bf16));
/// let err = "f64".parse::<ElemType>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "unknown element type; expected one of i8, u8, bf16, f16, i32, f32, bf8, hf8"
/// );
/// ```
impl FromStr for ElemType {
    type Err = ParseElemTypeError;

    fn from_str(name: &str) -> Result<ElemType, ParseElemTypeError> {
        ElemType::from_name(name).ok_or(ParseElemTypeError { _private: () })
    }
}

/// The text given to [`ElemType`]'s [`FromStr`] names no element type.
///
/// It does not hold the text: the crate does not allocate, and the caller still has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParseElemTypeError {
    // Private, so that the error can carry more detail later without a breaking change.
    _private: (),
}

impl fmt::Display for ParseElemTypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("unknown element type; expected one of ")?;
        for (i, t) in ElemType::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(t.name())?;
        }
        Ok(())
    }
}

impl core::error::Error for ParseElemTypeError {}
