//! The operand rules of the tile dot products (`TDPB[SU][SU]D`, TDPBF16PS, TDPFP16PS, the
//! AMX-FP8 `TDP[BH][BH]F8PS` and the AMX-COMPLEX `TCMM*FP16PS`) and of the AMX-AVX512 row moves.
//!
//! The same function decides at compile time which typed tile triples may be multiplied and at
//! run time whether an instruction would raise #UD, so the two can never disagree. Every dot
//! product has the same shape rule ([`check_dot`]); they differ in the element types their
//! operands hold ([`DOT_ELEMENTS`]).

use core::fmt;

use crate::shape::{ElemType, TileShape};

/// Every tile dot product by mnemonic, with the element types of its operands C, A and B: the
/// rule the typed tile handles check at compile time, beside the shape rule [`check_dot`] that
/// all of them share. A dword of A or B holds four 8-bit or two 16-bit elements; the AMX-COMPLEX
/// products read each dword as one complex number (real part in the low f16).
pub const DOT_ELEMENTS: [(&str, [ElemType; 3]); 12] = [
    ("TDPBSSD", [ElemType::I32, ElemType::I8, ElemType::I8]),
    ("TDPBSUD", [ElemType::I32, ElemType::I8, ElemType::U8]),
    ("TDPBUSD", [ElemType::I32, ElemType::U8, ElemType::I8]),
    ("TDPBUUD", [ElemType::I32, ElemType::U8, ElemType::U8]),
    ("TDPBF16PS", [ElemType::F32, ElemType::Bf16, ElemType::Bf16]),
    ("TDPFP16PS", [ElemType::F32, ElemType::F16, ElemType::F16]),
    ("TDPBF8PS", [ElemType::F32, ElemType::Bf8, ElemType::Bf8]),
    ("TDPBHF8PS", [ElemType::F32, ElemType::Bf8, ElemType::Hf8]),
    ("TDPHBF8PS", [ElemType::F32, ElemType::Hf8, ElemType::Bf8]),
    ("TDPHF8PS", [ElemType::F32, ElemType::Hf8, ElemType::Hf8]),
    (
        "TCMMIMFP16PS",
        [ElemType::F32, ElemType::F16, ElemType::F16],
    ),
    (
        "TCMMRLFP16PS",
        [ElemType::F32, ElemType::F16, ElemType::F16],
    ),
];

/// The AMX-AVX512 row moves by mnemonic, with the element type of the tile each reads (`None`:
/// any). They have no shape rule beyond a used tile whose colsb is a multiple of 4: a row index
/// at or past the tile's rows reads as zeros, not as a fault.
pub const ROW_ELEMENTS: [(&str, Option<ElemType>); 6] = [
    ("TILEMOVROW", None),
    ("TCVTROWD2PS", Some(ElemType::I32)),
    ("TCVTROWPS2BF16H", Some(ElemType::F32)),
    ("TCVTROWPS2BF16L", Some(ElemType::F32)),
    ("TCVTROWPS2PHH", Some(ElemType::F32)),
    ("TCVTROWPS2PHL", Some(ElemType::F32)),
];

/// The TMUL unit's limits (CPUID leaf 0x1E, subleaf 0, EBX).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TmulLimits {
    /// Largest K (rows of B, dwords per row of A): EBX\[7:0\].
    pub maxk: u8,
    /// Largest N in bytes (colsb of B and C): EBX\[23:8\].
    pub maxn: u16,
}

impl TmulLimits {
    /// The limits of every AMX CPU to date: K up to 16, N up to 64 bytes.
    pub const ARCHITECTURAL: TmulLimits = TmulLimits { maxk: 16, maxn: 64 };

    /// Decodes CPUID.(EAX=0x1E, ECX=0).EBX.
    pub const fn from_cpuid(ebx: u32) -> TmulLimits {
        TmulLimits {
            maxk: ebx as u8,
            maxn: (ebx >> 8) as u16,
        }
    }
}

/// The dot-product instructions; they share one operand rule set.
///
/// Exhaustive on purpose: the macro and every backend (the emulator's arithmetic, the
/// encodings of the silicon path, the trap engine's decoder) match on it without a wildcard,
/// so an instruction added here cannot compile until each of them implements it, and no
/// version can half-support one. A new instruction is therefore a breaking release of the
/// crates, which are released together; code that matches on it is told by its compiler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DotKind {
    /// signed A x signed B -> i32.
    Tdpbssd,
    /// signed A x unsigned B -> i32.
    Tdpbsud,
    /// unsigned A x signed B -> i32.
    Tdpbusd,
    /// unsigned A x unsigned B -> i32.
    Tdpbuud,
    /// bf16 pairs -> f32.
    Tdpbf16ps,
    /// fp16 pairs -> f32.
    Tdpfp16ps,
}

impl DotKind {
    /// Every dot-product instruction, in the order of the enum.
    pub const ALL: [DotKind; 6] = [
        DotKind::Tdpbssd,
        DotKind::Tdpbsud,
        DotKind::Tdpbusd,
        DotKind::Tdpbuud,
        DotKind::Tdpbf16ps,
        DotKind::Tdpfp16ps,
    ];

    /// The mnemonic, upper case as in the manual.
    pub const fn mnemonic(self) -> &'static str {
        match self {
            DotKind::Tdpbssd => "TDPBSSD",
            DotKind::Tdpbsud => "TDPBSUD",
            DotKind::Tdpbusd => "TDPBUSD",
            DotKind::Tdpbuud => "TDPBUUD",
            DotKind::Tdpbf16ps => "TDPBF16PS",
            DotKind::Tdpfp16ps => "TDPFP16PS",
        }
    }
}

/// Why a dot product's operands do not fit (each one is a #UD on the silicon).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DotMismatch {
    /// Two operands name the same tile register.
    Aliased {
        /// The operand roles, e.g. `("C", "A")`.
        roles: (&'static str, &'static str),
        /// The tile both name.
        tile: u8,
    },
    /// An operand tile is unused in the loaded configuration.
    Unused {
        /// The operand role.
        role: &'static str,
        /// The tile.
        tile: u8,
    },
    /// An operand's colsb is not a multiple of 4.
    ColsbNotMultipleOf4 {
        /// The operand role.
        role: &'static str,
        /// The tile.
        tile: u8,
        /// Its colsb.
        colsb: u16,
    },
    /// C.rows != A.rows (M differs).
    RowsMismatch {
        /// Tiles (C, A).
        tiles: (u8, u8),
        /// C.rows.
        c_rows: u8,
        /// A.rows.
        a_rows: u8,
    },
    /// A.colsb / 4 != B.rows (K differs).
    KMismatch {
        /// Tiles (A, B).
        tiles: (u8, u8),
        /// A.colsb.
        a_colsb: u16,
        /// B.rows.
        b_rows: u8,
    },
    /// C.colsb != B.colsb (N differs).
    NMismatch {
        /// Tiles (C, B).
        tiles: (u8, u8),
        /// C.colsb.
        c_colsb: u16,
        /// B.colsb.
        b_colsb: u16,
    },
    /// K = A.colsb / 4 (= B.rows) exceeds tmul_maxk.
    KTooLarge {
        /// K.
        k: u16,
        /// tmul_maxk.
        maxk: u8,
    },
    /// N = C.colsb (= B.colsb) exceeds tmul_maxn.
    NTooLarge {
        /// C.colsb.
        colsb: u16,
        /// tmul_maxn.
        maxn: u16,
    },
}

impl fmt::Display for DotMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DotMismatch::Aliased { roles, tile } => write!(
                f,
                "operands {} and {} are both tile t{tile}; C, A and B must be three different tiles",
                roles.0, roles.1
            ),
            DotMismatch::Unused { role, tile } => {
                write!(f, "operand {role} is tile t{tile}, which is unused (0 rows, 0 colsb)")
            }
            DotMismatch::ColsbNotMultipleOf4 { role, tile, colsb } => write!(
                f,
                "operand {role} (tile t{tile}) has {colsb} bytes per row, not a multiple of 4"
            ),
            DotMismatch::RowsMismatch { tiles, c_rows, a_rows } => write!(
                f,
                "C (t{}) has {c_rows} rows but A (t{}) has {a_rows}; C.rows must equal A.rows (M)",
                tiles.0, tiles.1
            ),
            DotMismatch::KMismatch { tiles, a_colsb, b_rows } => write!(
                f,
                "A (t{}) has {a_colsb} bytes per row, so K = {}, but B (t{}) has {b_rows} rows; B.rows must equal A.colsb / 4 (K)",
                tiles.0,
                a_colsb / 4,
                tiles.1
            ),
            DotMismatch::NMismatch { tiles, c_colsb, b_colsb } => write!(
                f,
                "C (t{}) has {c_colsb} bytes per row but B (t{}) has {b_colsb}; C.colsb must equal B.colsb (N)",
                tiles.0, tiles.1
            ),
            DotMismatch::KTooLarge { k, maxk } => {
                write!(f, "K = {k} exceeds this CPU's TMUL limit of {maxk} (tmul_maxk)")
            }
            DotMismatch::NTooLarge { colsb, maxn } => write!(
                f,
                "N = {colsb} bytes exceeds this CPU's TMUL limit of {maxn} bytes (tmul_maxn)"
            ),
        }
    }
}

impl core::error::Error for DotMismatch {}

/// Checks the operands `C += A x B` of a tile dot product, given each tile's register number
/// and its shape in the loaded configuration. Returns the first mismatch in a fixed order:
/// aliasing, unused tiles, colsb % 4, M, K, N, then the TMUL limits.
pub const fn check_dot(
    c: (u8, TileShape),
    a: (u8, TileShape),
    b: (u8, TileShape),
    limits: TmulLimits,
) -> Result<(), DotMismatch> {
    if c.0 == a.0 {
        return Err(DotMismatch::Aliased {
            roles: ("C", "A"),
            tile: c.0,
        });
    }
    if c.0 == b.0 {
        return Err(DotMismatch::Aliased {
            roles: ("C", "B"),
            tile: c.0,
        });
    }
    if a.0 == b.0 {
        return Err(DotMismatch::Aliased {
            roles: ("A", "B"),
            tile: a.0,
        });
    }
    let ops = [("C", c), ("A", a), ("B", b)];
    let mut i = 0;
    while i < 3 {
        let (role, (tile, shape)) = ops[i];
        if shape.rows == 0 || shape.colsb == 0 {
            return Err(DotMismatch::Unused { role, tile });
        }
        i += 1;
    }
    i = 0;
    while i < 3 {
        let (role, (tile, shape)) = ops[i];
        if shape.colsb % 4 != 0 {
            return Err(DotMismatch::ColsbNotMultipleOf4 {
                role,
                tile,
                colsb: shape.colsb,
            });
        }
        i += 1;
    }
    if c.1.rows != a.1.rows {
        return Err(DotMismatch::RowsMismatch {
            tiles: (c.0, a.0),
            c_rows: c.1.rows,
            a_rows: a.1.rows,
        });
    }
    if a.1.colsb / 4 != b.1.rows as u16 {
        return Err(DotMismatch::KMismatch {
            tiles: (a.0, b.0),
            a_colsb: a.1.colsb,
            b_rows: b.1.rows,
        });
    }
    if c.1.colsb != b.1.colsb {
        return Err(DotMismatch::NMismatch {
            tiles: (c.0, b.0),
            c_colsb: c.1.colsb,
            b_colsb: b.1.colsb,
        });
    }
    if a.1.colsb / 4 > limits.maxk as u16 {
        return Err(DotMismatch::KTooLarge {
            k: a.1.colsb / 4,
            maxk: limits.maxk,
        });
    }
    if c.1.colsb > limits.maxn {
        return Err(DotMismatch::NTooLarge {
            colsb: c.1.colsb,
            maxn: limits.maxn,
        });
    }
    Ok(())
}
