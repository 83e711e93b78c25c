//! Typed errors: configuration errors, instruction faults, and why AMX is unavailable.

use std::fmt;

use amx_tilecfg::{DotKind, DotMismatch, NoSuchTile, Rule, Violation};

/// A tile configuration broke one or more rules.
///
/// Prints the same sentences as the `tilecfg!` compile errors, one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    violations: Vec<Violation>,
    missing: Vec<NoSuchTile>,
    start_row_under_init: Option<u8>,
    unused_shapes: Vec<u8>,
}

impl ConfigError {
    pub(crate) fn new(violations: Vec<Violation>) -> ConfigError {
        ConfigError::with_missing(violations, Vec::new())
    }

    pub(crate) fn with_missing(
        violations: Vec<Violation>,
        missing: Vec<NoSuchTile>,
    ) -> ConfigError {
        ConfigError {
            violations,
            missing,
            start_row_under_init: None,
            unused_shapes: Vec::new(),
        }
    }

    pub(crate) fn with_unused_shapes(mut self, tiles: Vec<u8>) -> ConfigError {
        self.unused_shapes = tiles;
        self
    }

    /// The builder's palette 0 with a start_row, which LDTILECFG would ignore.
    pub(crate) fn with_start_row_under_init(mut self, start_row: u8) -> ConfigError {
        self.start_row_under_init = Some(start_row);
        self
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.violations.is_empty()
            && self.missing.is_empty()
            && self.start_row_under_init.is_none()
            && self.unused_shapes.is_empty()
    }

    /// The tiles given the shape `0 x 0` (the builder's): the shape of an unused tile, which
    /// the configuration gets by leaving the tile out, so giving it is a mistake, as in the
    /// `tilecfg!` macro.
    pub fn unused_shapes(&self) -> &[u8] {
        &self.unused_shapes
    }

    /// A non-zero start_row given to the builder with palette 0 (INIT configures no tile, so
    /// LDTILECFG would ignore it, as it ignores any tile; only the builder can produce this).
    pub fn start_row_under_init(&self) -> Option<u8> {
        self.start_row_under_init
    }

    /// Tile numbers that name no tile of the palette (only the builder can produce these).
    pub fn missing_tiles(&self) -> &[NoSuchTile] {
        &self.missing
    }

    /// Every broken rule, each naming the tile, field, byte offset, value and limit.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let init = self.start_row_under_init.map(|row| {
            format!(
                "start_row {row} under palette 0: INIT configures no tile, so LDTILECFG ignores \
                 it; remove it or use palette 1"
            )
        });
        let unused: Vec<String> = self
            .unused_shapes
            .iter()
            .map(|t| {
                format!(
                    "tile t{t} is 0 x 0, the shape of an unused tile; leave t{t} out to keep it \
                     unused"
                )
            })
            .collect();
        let sentences = init
            .iter()
            .map(|s| s as &dyn fmt::Display)
            .chain(unused.iter().map(|s| s as &dyn fmt::Display))
            .chain(self.missing.iter().map(|m| m as &dyn fmt::Display))
            .chain(self.violations.iter().map(|v| v as &dyn fmt::Display));
        for (i, s) in sentences.enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// What a tile instruction would do instead of completing: the exception the silicon raises, or
/// the safe API's refusal to touch memory outside a slice.
///
/// Both backends return the same `Fault` for the same state and operands: the hardware backend
/// checks every condition before it executes, so a safe call never raises a real exception.
/// Each variant carries the cause as data (the broken rules, the operand mismatch, the missing
/// feature), and `Display` words it.
///
/// ```
/// use amx_runtime::{Emulator, Fault, Mnemonic, TileUnit, UdReason};
///
/// let mut emu = Emulator::new();
/// let Err(Fault::InvalidOpcode(ud)) = emu.tilezero(3) else { unreachable!() };
/// assert_eq!(ud.instruction(), Mnemonic::Tilezero);
/// assert_eq!(ud.reason(), UdReason::NotConfigured);
/// assert_eq!(
///     Fault::InvalidOpcode(ud).to_string(),
///     "#UD: TILEZERO with no tile configuration loaded (TILES_CONFIGURED = 0)"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// #GP(0): LDTILECFG of an image that breaks a load-time rule (SIGSEGV on Linux).
    GeneralProtection(GeneralProtection),
    /// #UD: a tile instruction on an unconfigured or unused tile, with operands that do not
    /// fit, or on a CPU without the instruction (SIGILL on Linux).
    InvalidOpcode(InvalidOpcode),
    /// Not a CPU exception: the rows the instruction would touch do not lie inside the slice
    /// passed to a safe load or store (on the silicon this would read or write out of bounds).
    /// Counted in elements of that slice, the unit its stride is given in: bytes for the
    /// `&[u8]` methods of [`TileUnit`](crate::TileUnit), the tile's elements for
    /// [`TypedTiles`](crate::TypedTiles).
    OutOfBounds {
        /// The tile being loaded or stored.
        tile: u8,
        /// Elements the instruction needs (the end of the last row it touches); `usize::MAX`
        /// where that end overflows (a stride too large for any slice).
        needed: usize,
        /// Elements the slice has.
        len: usize,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::GeneralProtection(gp) => write!(f, "#GP: {gp}"),
            Fault::InvalidOpcode(ud) => write!(f, "#UD: {ud}"),
            Fault::OutOfBounds {
                tile,
                needed: usize::MAX,
                len,
            } => write!(
                f,
                "tile t{tile}'s rows would end past the largest possible slice (its stride is too \
                 large for any memory); its slice has {len} elements"
            ),
            Fault::OutOfBounds { tile, needed, len } => write!(
                f,
                "tile t{tile} would touch the first {needed} elements of its slice, which has \
                 only {len}"
            ),
        }
    }
}

// The message words the cause itself (the rules, the mismatch), so there is no `source` below
// it: a printed chain shows each sentence once.
impl std::error::Error for Fault {}

impl From<GeneralProtection> for Fault {
    fn from(gp: GeneralProtection) -> Fault {
        Fault::GeneralProtection(gp)
    }
}

impl From<InvalidOpcode> for Fault {
    fn from(ud: InvalidOpcode) -> Fault {
        Fault::InvalidOpcode(ud)
    }
}

/// Why LDTILECFG raises #GP: the load-time rules the image breaks, in the order
/// [`amx_tilecfg::validate()`] reports them (never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GeneralProtection {
    violations: Vec<Violation>,
}

impl GeneralProtection {
    /// The #GP of an image that breaks `violations`, or `None` when there are none (the image
    /// loads).
    pub fn new(violations: Vec<Violation>) -> Option<GeneralProtection> {
        (!violations.is_empty()).then_some(GeneralProtection { violations })
    }

    /// Every load-time rule the image breaks, each naming the tile, field, byte offset, value
    /// and limit.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }
}

impl fmt::Display for GeneralProtection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{v}")?;
        }
        Ok(())
    }
}

/// Why a tile instruction raises #UD: the instruction, and the condition that fails.
///
/// A plain value (`Copy`, no allocation): the trap engine decides #UD in a signal handler with
/// the same conditions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InvalidOpcode {
    instruction: Mnemonic,
    reason: UdReason,
}

impl InvalidOpcode {
    /// The #UD of `instruction` for `reason`.
    pub const fn new(instruction: Mnemonic, reason: UdReason) -> InvalidOpcode {
        InvalidOpcode {
            instruction,
            reason,
        }
    }

    /// The instruction that faults.
    pub const fn instruction(&self) -> Mnemonic {
        self.instruction
    }

    /// The condition that makes it fault.
    pub const fn reason(&self) -> UdReason {
        self.reason
    }
}

impl fmt::Display for InvalidOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.instruction;
        match self.reason {
            UdReason::NotConfigured => {
                write!(
                    f,
                    "{m} with no tile configuration loaded (TILES_CONFIGURED = 0)"
                )
            }
            UdReason::NoSuchTile { tile } => {
                write!(f, "{m} names tile t{tile}; there are only t0 to t7")
            }
            UdReason::Unused { tile } => write!(
                f,
                "{m} on tile t{tile}, which the loaded configuration leaves unused"
            ),
            UdReason::ColsbNotMultipleOf4 { tile, colsb } => write!(
                f,
                "{m} on tile t{tile}, whose {colsb} bytes per row (colsb) are not a multiple of 4"
            ),
            UdReason::StartRowNotBelowRows {
                tile,
                start_row,
                rows,
            } => write!(
                f,
                "{m} on tile t{tile} with start_row {start_row}, not below its {rows} rows"
            ),
            UdReason::DotOperands(mismatch) => write!(f, "{m}: {mismatch}"),
            UdReason::MissingFeature(Feature::XsaveTileData) => write!(
                f,
                "{m}: CPUID.(0xD,18) does not describe the tile data (XTILEDATA)"
            ),
            UdReason::MissingFeature(Feature::ZmmState) => write!(
                f,
                "{m}: the OS has not enabled the AVX-512 register state its zmm destination \
                 needs (XCR0 bits 1, 2, 5, 6 and 7)"
            ),
            UdReason::MissingFeature(feature) => {
                write!(f, "{m}: this CPU does not report {feature}")
            }
        }
    }
}

/// The condition under which a tile instruction raises #UD (see
/// [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UdReason {
    /// No tile configuration is loaded (TILES_CONFIGURED = 0).
    NotConfigured,
    /// A tile number past t7.
    NoSuchTile {
        /// The tile number.
        tile: u8,
    },
    /// The tile is unused in the loaded configuration.
    Unused {
        /// The tile number.
        tile: u8,
    },
    /// The tile's colsb is not a multiple of 4 (rule
    /// [`Rule::ColsbNotMultipleOf4`](amx_tilecfg::Rule::ColsbNotMultipleOf4)).
    ColsbNotMultipleOf4 {
        /// The tile number.
        tile: u8,
        /// Its bytes per row.
        colsb: u16,
    },
    /// start_row is not below the tile's rows (rule
    /// [`Rule::StartRowNotBelowRows`](amx_tilecfg::Rule::StartRowNotBelowRows)).
    StartRowNotBelowRows {
        /// The tile number.
        tile: u8,
        /// The loaded start_row.
        start_row: u8,
        /// The tile's rows.
        rows: u8,
    },
    /// The dot product's operands do not fit. (No item of this crate is named `Dot` but
    /// the typed layer's trait, so rustc prints that one without a path.)
    DotOperands(DotMismatch),
    /// The CPU does not implement the instruction (or, for XSAVE, does not describe the tile
    /// data's place in its save area).
    MissingFeature(Feature),
}

impl UdReason {
    /// The configuration rule behind this #UD, for the two use-time rules of
    /// [`amx_tilecfg`]; `None` for the other conditions.
    pub const fn rule(&self) -> Option<Rule> {
        match self {
            UdReason::ColsbNotMultipleOf4 { .. } => Some(Rule::ColsbNotMultipleOf4),
            UdReason::StartRowNotBelowRows { .. } => Some(Rule::StartRowNotBelowRows),
            _ => None,
        }
    }
}

/// The instructions a [`Fault`] can be about, spelled as in Intel's manual.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mnemonic {
    /// LDTILECFG.
    Ldtilecfg,
    /// STTILECFG.
    Sttilecfg,
    /// TILERELEASE.
    Tilerelease,
    /// TILEZERO.
    Tilezero,
    /// TILELOADD.
    Tileloadd,
    /// TILELOADDT1.
    Tileloaddt1,
    /// TILESTORED.
    Tilestored,
    /// One of the dot products of AMX-INT8, AMX-BF16 and AMX-FP16.
    DotProduct(DotKind),
    /// XSAVE of the tile data ([`TileUnit::tile_data`](crate::TileUnit::tile_data)).
    Xsave,
    /// TILELOADDRS (AMX-MOVRS).
    Tileloaddrs,
    /// TILELOADDRST1 (AMX-MOVRS).
    Tileloaddrst1,
    /// TDPBF8PS (AMX-FP8).
    Tdpbf8ps,
    /// TDPBHF8PS (AMX-FP8).
    Tdpbhf8ps,
    /// TDPHBF8PS (AMX-FP8).
    Tdphbf8ps,
    /// TDPHF8PS (AMX-FP8).
    Tdphf8ps,
    /// TCMMIMFP16PS (AMX-COMPLEX).
    Tcmmimfp16ps,
    /// TCMMRLFP16PS (AMX-COMPLEX).
    Tcmmrlfp16ps,
    /// TILEMOVROW (AMX-AVX512).
    Tilemovrow,
    /// TCVTROWD2PS (AMX-AVX512).
    Tcvtrowd2ps,
    /// TCVTROWPS2BF16H (AMX-AVX512).
    Tcvtrowps2bf16h,
    /// TCVTROWPS2BF16L (AMX-AVX512).
    Tcvtrowps2bf16l,
    /// TCVTROWPS2PHH (AMX-AVX512).
    Tcvtrowps2phh,
    /// TCVTROWPS2PHL (AMX-AVX512).
    Tcvtrowps2phl,
}

impl Mnemonic {
    /// The mnemonic, upper case as in the manual.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mnemonic::Ldtilecfg => "LDTILECFG",
            Mnemonic::Sttilecfg => "STTILECFG",
            Mnemonic::Tilerelease => "TILERELEASE",
            Mnemonic::Tilezero => "TILEZERO",
            Mnemonic::Tileloadd => "TILELOADD",
            Mnemonic::Tileloaddt1 => "TILELOADDT1",
            Mnemonic::Tilestored => "TILESTORED",
            Mnemonic::DotProduct(kind) => kind.mnemonic(),
            Mnemonic::Xsave => "XSAVE",
            Mnemonic::Tileloaddrs => "TILELOADDRS",
            Mnemonic::Tileloaddrst1 => "TILELOADDRST1",
            Mnemonic::Tdpbf8ps => "TDPBF8PS",
            Mnemonic::Tdpbhf8ps => "TDPBHF8PS",
            Mnemonic::Tdphbf8ps => "TDPHBF8PS",
            Mnemonic::Tdphf8ps => "TDPHF8PS",
            Mnemonic::Tcmmimfp16ps => "TCMMIMFP16PS",
            Mnemonic::Tcmmrlfp16ps => "TCMMRLFP16PS",
            Mnemonic::Tilemovrow => "TILEMOVROW",
            Mnemonic::Tcvtrowd2ps => "TCVTROWD2PS",
            Mnemonic::Tcvtrowps2bf16h => "TCVTROWPS2BF16H",
            Mnemonic::Tcvtrowps2bf16l => "TCVTROWPS2BF16L",
            Mnemonic::Tcvtrowps2phh => "TCVTROWPS2PHH",
            Mnemonic::Tcvtrowps2phl => "TCVTROWPS2PHL",
        }
    }
}

impl fmt::Display for Mnemonic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A CPU feature a tile instruction needs, with the CPUID bit that reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// AMX-INT8 (CPUID.(7,0):EDX\[25\]): TDPBSSD, TDPBSUD, TDPBUSD, TDPBUUD.
    AmxInt8,
    /// AMX-BF16 (CPUID.(7,0):EDX\[22\]): TDPBF16PS.
    AmxBf16,
    /// AMX-FP16 (CPUID.(7,1):EAX\[21\]): TDPFP16PS.
    AmxFp16,
    /// The tile data's place in the XSAVE area (CPUID.(0xD,18)), which reading a whole tile
    /// needs.
    XsaveTileData,
    /// AMX-FP8 (CPUID.(0x1E,1):EAX\[4\]): TDPBF8PS, TDPBHF8PS, TDPHBF8PS, TDPHF8PS.
    AmxFp8,
    /// AMX-COMPLEX (CPUID.(7,1):EDX\[8\]): TCMMIMFP16PS, TCMMRLFP16PS.
    AmxComplex,
    /// AMX-MOVRS (CPUID.(0x1E,1):EAX\[8\]): TILELOADDRS, TILELOADDRST1.
    AmxMovrs,
    /// AMX-AVX512 (CPUID.(0x1E,1):EAX\[7\]): TILEMOVROW and the TCVTROW* conversions.
    AmxAvx512,
    /// The AVX-512 register state enabled by the OS (XCR0 bits 1, 2, 5, 6, 7), without which an
    /// instruction writing a zmm register raises #UD.
    ZmmState,
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Feature::AmxInt8 => "AMX-INT8 (CPUID.(7,0):EDX[25])",
            Feature::AmxBf16 => "AMX-BF16 (CPUID.(7,0):EDX[22])",
            Feature::AmxFp16 => "AMX-FP16 (CPUID.(7,1):EAX[21])",
            Feature::XsaveTileData => "the XSAVE layout of the tile data (CPUID.(0xD,18))",
            Feature::AmxFp8 => "AMX-FP8 (CPUID.(0x1E,1):EAX[4])",
            Feature::AmxComplex => "AMX-COMPLEX (CPUID.(7,1):EDX[8])",
            Feature::AmxMovrs => "AMX-MOVRS (CPUID.(0x1E,1):EAX[8])",
            Feature::AmxAvx512 => "AMX-AVX512 (CPUID.(0x1E,1):EAX[7])",
            Feature::ZmmState => {
                "the AVX-512 register state enabled by the OS (XCR0 bits 1, 2, 5, 6 and 7)"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Emulator, TileConfig, TileUnit};
    use amx_tilecfg::{Rule, TmulLimits};

    fn emulator_with(config: &TileConfig) -> Emulator {
        let mut emu = Emulator::new();
        emu.ldtilecfg(config.as_bytes()).unwrap();
        emu
    }

    #[test]
    fn a_stride_too_large_for_any_slice_is_said_so() {
        let config = TileConfig::builder().tile(0, 16, 64).build().unwrap();
        let mut emu = emulator_with(&config);
        let data = [0u8; 1024];
        let err = emu.tileloadd(0, &data, usize::MAX / 2).unwrap_err();
        assert!(
            matches!(
                err,
                Fault::OutOfBounds {
                    needed: usize::MAX,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("too large for any memory"),
            "{err}"
        );
    }

    #[test]
    fn invalid_opcode_carries_instruction_and_reason() {
        let mut emu = Emulator::new();
        let ud = |r: Result<(), Fault>| match r {
            Err(Fault::InvalidOpcode(ud)) => (ud.instruction(), ud.reason()),
            other => panic!("not #UD: {other:?}"),
        };
        assert_eq!(
            ud(emu.tilezero(2)),
            (Mnemonic::Tilezero, UdReason::NotConfigured)
        );
        let config = TileConfig::builder()
            .tile(0, 16, 64)
            .tile(1, 16, 64)
            .tile(2, 8, 64)
            .build()
            .unwrap();
        let mut emu = emulator_with(&config);
        assert_eq!(
            ud(emu.tilezero(5)),
            (Mnemonic::Tilezero, UdReason::Unused { tile: 5 })
        );
        assert_eq!(
            ud(emu.tileloadd(9, &[0; 1024], 64)),
            (Mnemonic::Tileloadd, UdReason::NoSuchTile { tile: 9 })
        );
        let (m, why) = ud(emu.tdpbssd(0, 1, 2));
        assert_eq!(m, Mnemonic::DotProduct(DotKind::Tdpbssd));
        assert!(
            matches!(
                why,
                UdReason::DotOperands(DotMismatch::KMismatch { tiles: (1, 2), .. })
            ),
            "{why:?}"
        );
        // colsb 6 loads (a use-time rule) and is refused on use, naming the rule.
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        bytes[16] = 6;
        bytes[48] = 2;
        let mut emu = emulator_with(&TileConfig::from_bytes(&bytes).unwrap());
        let mut out = [0u8; 64];
        let (m, why) = ud(emu.tilestored(0, &mut out, 8));
        assert_eq!(m, Mnemonic::Tilestored);
        assert_eq!(why, UdReason::ColsbNotMultipleOf4 { tile: 0, colsb: 6 });
        assert_eq!(why.rule(), Some(Rule::ColsbNotMultipleOf4));
        assert_eq!(UdReason::NotConfigured.rule(), None);
    }

    #[test]
    fn general_protection_carries_every_load_violation() {
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        bytes[5] = 1; // reserved
        bytes[16] = 80; // t0 colsb past 64
        bytes[48] = 17; // t0 rows past 16
        let fault = Emulator::new().ldtilecfg(&bytes).unwrap_err();
        let Fault::GeneralProtection(gp) = &fault else {
            panic!("not #GP: {fault:?}")
        };
        let rules: Vec<Rule> = gp.violations().iter().map(|v| v.rule).collect();
        assert_eq!(
            rules,
            [
                Rule::ReservedNonZero,
                Rule::ColsbTooLarge,
                Rule::RowsTooLarge
            ]
        );
        // One sentence per violation, as before the cause became data.
        assert_eq!(
            fault.to_string(),
            "#GP: byte 5 is reserved and must be 0, but holds 0x01; tile t0 has 80 bytes per \
             row (colsb); palette 1 allows at most 64 (bytes_per_row); tile t0 has 17 rows; \
             palette 1 allows at most 16 (max_rows)"
        );
        assert_eq!(GeneralProtection::new(Vec::new()), None);
    }

    #[test]
    fn messages_word_each_reason() {
        let ud = |m, r| Fault::InvalidOpcode(InvalidOpcode::new(m, r)).to_string();
        assert_eq!(
            ud(
                Mnemonic::Tileloaddt1,
                UdReason::StartRowNotBelowRows {
                    tile: 3,
                    start_row: 9,
                    rows: 4
                }
            ),
            "#UD: TILELOADDT1 on tile t3 with start_row 9, not below its 4 rows"
        );
        assert_eq!(
            ud(
                Mnemonic::DotProduct(DotKind::Tdpfp16ps),
                UdReason::MissingFeature(Feature::AmxFp16)
            ),
            "#UD: TDPFP16PS: this CPU does not report AMX-FP16 (CPUID.(7,1):EAX[21])"
        );
        assert_eq!(
            ud(
                Mnemonic::Xsave,
                UdReason::MissingFeature(Feature::XsaveTileData)
            ),
            "#UD: XSAVE: CPUID.(0xD,18) does not describe the tile data (XTILEDATA)"
        );
    }

    #[test]
    fn a_smaller_emulator_refuses_typed_tiles_with_its_limits() {
        use crate::{Backend, ConfigureError, Requirement};
        crate::tilecfg! {
            struct Int8;
            palette 1;
            t0 as c: 16x16 i32;
            t4 as a: 16x64 i8;
            t6 as b: 16x64 i8;
        }
        let small = TmulLimits { maxk: 8, maxn: 64 };
        let table = amx_tilecfg::PaletteTable::ARCHITECTURAL;
        std::thread::spawn(move || {
            crate::set_thread_emulator(Emulator::with_limits(table, small).unwrap()).unwrap();
            let err = match crate::configure_typed_on::<Int8>(Backend::Emulated) {
                Err(ConfigureError::Unsupported(why)) => why,
                Err(other) => panic!("{other}"),
                Ok(_) => panic!("typed tiles accepted tmul_maxk 8"),
            };
            assert_eq!(err.backend(), Backend::Emulated);
            assert_eq!(err.missing(), &[Requirement::TmulLimits(small)]);
            assert!(err.to_string().contains("models tmul_maxk 8"), "{err}");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn permission_errors_convert_to_io_errors() {
        use crate::permit::PermissionError;
        let refused = PermissionError { errno: libc::EPERM };
        assert_eq!(refused.raw_os_error(), Some(libc::EPERM));
        assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
        let io: std::io::Error = refused.into();
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
        assert_eq!(io.to_string(), refused.to_string());
        let inner = io
            .get_ref()
            .and_then(|e| e.downcast_ref::<PermissionError>());
        assert_eq!(inner, Some(&refused));
    }

    /// Printing an error's chain prints each message once.
    #[test]
    fn error_chains_print_each_message_once() {
        use crate::detect::Unavailable;
        use crate::{BackendError, ConfigureError};
        use std::error::Error;
        let unavailable = Unavailable::PermissionRefused {
            errno: libc::ENOSPC,
        };
        let errors: Vec<Box<dyn Error>> = vec![
            Box::new(ConfigureError::Backend(BackendError::HardwareUnavailable(
                unavailable.clone(),
            ))),
            Box::new(ConfigureError::Unavailable(unavailable)),
            Box::new(ConfigureError::Fault(
                Emulator::new().tilezero(0).unwrap_err(),
            )),
            Box::new(ConfigureError::Config(
                TileConfig::builder().tile(0, 17, 64).build().unwrap_err(),
            )),
        ];
        for e in errors {
            let mut seen = vec![e.to_string()];
            let mut next = e.source();
            while let Some(inner) = next {
                let text = inner.to_string();
                assert!(
                    !seen.iter().any(|outer| outer.contains(&text)),
                    "{text:?} is printed by an outer level too: {seen:?}"
                );
                seen.push(text);
                next = inner.source();
            }
        }
    }
}
