//! The catalog of tile-configuration rules and the sentences that report them.
//!
//! Every message is produced here, so the compile errors of `tilecfg!` and the run-time
//! `ConfigError`s of `amx-runtime` print the same sentence for the same mistake.

use core::fmt;

/// When the silicon enforces a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RuleKind {
    /// LDTILECFG rejects the image with #GP.
    Load,
    /// LDTILECFG accepts the image, but TILELOADD/TILESTORED/TDP* on the tile raise #UD.
    Use,
}

/// One rule of the tile configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Rule {
    /// palette_id is above the table's max_palette (#GP).
    PaletteUnsupported,
    /// A reserved byte (2..=15, 32..=47, 56..=63) is not zero (#GP).
    ReservedNonZero,
    /// A colsb/rows byte of a tile slot past the palette's max_names is not zero (#GP).
    TileBeyondNames,
    /// colsb > bytes_per_row (#GP).
    ColsbTooLarge,
    /// rows > max_rows (#GP).
    RowsTooLarge,
    /// rows != 0 while colsb == 0 (#GP).
    RowsWithoutColsb,
    /// colsb != 0 while rows == 0 (#GP).
    ColsbWithoutRows,
    /// colsb is not a multiple of 4 (#UD on use).
    ColsbNotMultipleOf4,
    /// start_row >= the tile's rows (#UD on TILELOADD/TILESTORED).
    StartRowNotBelowRows,
}

impl Rule {
    /// Every rule, load-time rules first.
    pub const ALL: [Rule; 9] = [
        Rule::PaletteUnsupported,
        Rule::ReservedNonZero,
        Rule::TileBeyondNames,
        Rule::ColsbTooLarge,
        Rule::RowsTooLarge,
        Rule::RowsWithoutColsb,
        Rule::ColsbWithoutRows,
        Rule::ColsbNotMultipleOf4,
        Rule::StartRowNotBelowRows,
    ];

    /// When the silicon enforces this rule.
    pub const fn kind(self) -> RuleKind {
        match self {
            Rule::ColsbNotMultipleOf4 | Rule::StartRowNotBelowRows => RuleKind::Use,
            _ => RuleKind::Load,
        }
    }

    /// A short, stable name for the rule (used in docs and test names).
    pub const fn name(self) -> &'static str {
        match self {
            Rule::PaletteUnsupported => "palette-unsupported",
            Rule::ReservedNonZero => "reserved-nonzero",
            Rule::TileBeyondNames => "tile-beyond-max-names",
            Rule::ColsbTooLarge => "colsb-too-large",
            Rule::RowsTooLarge => "rows-too-large",
            Rule::RowsWithoutColsb => "rows-without-colsb",
            Rule::ColsbWithoutRows => "colsb-without-rows",
            Rule::ColsbNotMultipleOf4 => "colsb-not-multiple-of-4",
            Rule::StartRowNotBelowRows => "start-row-not-below-rows",
        }
    }
}

/// The field of the image a violation is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Field {
    /// Byte 0.
    PaletteId,
    /// Byte 1.
    StartRow,
    /// A reserved byte.
    Reserved,
    /// A tile's colsb word.
    Colsb,
    /// A tile's rows byte.
    Rows,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::PaletteId => "palette_id",
            Field::StartRow => "start_row",
            Field::Reserved => "reserved",
            Field::Colsb => "colsb",
            Field::Rows => "rows",
        })
    }
}

/// One broken rule: which rule, on which tile and byte, with the value found and the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Violation {
    /// The rule that is broken.
    pub rule: Rule,
    /// The tile concerned, if the rule is about a tile.
    pub tile: Option<u8>,
    /// Offset in the 64-byte image of the offending field.
    pub offset: u8,
    /// The value found there.
    pub value: u32,
    /// The limit the value breaks. For the palette id, colsb and rows: the largest allowed
    /// value. For a reserved byte, and for rows or colsb set without the other: 0. For a tile
    /// past max_names: max_names. For colsb % 4: 4. For start_row: the tile's rows, which it
    /// must stay below.
    pub limit: u32,
    /// The palette id of the image.
    pub palette: u8,
}

impl Violation {
    /// The field the violation is about.
    pub const fn field(&self) -> Field {
        match self.rule {
            Rule::PaletteUnsupported => Field::PaletteId,
            Rule::ReservedNonZero => Field::Reserved,
            Rule::StartRowNotBelowRows => Field::StartRow,
            Rule::ColsbTooLarge | Rule::ColsbWithoutRows | Rule::ColsbNotMultipleOf4 => {
                Field::Colsb
            }
            Rule::RowsTooLarge | Rule::RowsWithoutColsb => Field::Rows,
            Rule::TileBeyondNames => {
                if self.offset >= crate::image::ROWS as u8 {
                    Field::Rows
                } else {
                    Field::Colsb
                }
            }
        }
    }

    /// When the silicon enforces the broken rule.
    pub const fn kind(&self) -> RuleKind {
        self.rule.kind()
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.tile.unwrap_or(0);
        let (p, v, l) = (self.palette, self.value, self.limit);
        match self.rule {
            Rule::PaletteUnsupported => write!(
                f,
                "palette {v} is not supported; the palette table allows at most palette {l} (max_palette)"
            ),
            Rule::ReservedNonZero => write!(
                f,
                "byte {} is reserved and must be 0, but holds {v:#04x}",
                self.offset
            ),
            Rule::TileBeyondNames => write!(
                f,
                "byte {} ({} of tile t{t}) is reserved: palette {p} has {l} tiles (max_names), but it holds {v:#04x}",
                self.offset,
                self.field()
            ),
            Rule::ColsbTooLarge => write!(
                f,
                "tile t{t} has {v} bytes per row (colsb); palette {p} allows at most {l} (bytes_per_row)"
            ),
            Rule::RowsTooLarge => write!(
                f,
                "tile t{t} has {v} rows; palette {p} allows at most {l} (max_rows)"
            ),
            Rule::RowsWithoutColsb => write!(
                f,
                "tile t{t} has {v} rows but 0 bytes per row (colsb); rows and colsb must both be 0 (an unused tile) or both be nonzero"
            ),
            Rule::ColsbWithoutRows => write!(
                f,
                "tile t{t} has {v} bytes per row (colsb) but 0 rows; rows and colsb must both be 0 (an unused tile) or both be nonzero"
            ),
            Rule::ColsbNotMultipleOf4 => write!(
                f,
                "tile t{t} has {v} bytes per row (colsb), not a multiple of 4; TILELOADD, TILESTORED and every TDP* raise #UD on such a tile"
            ),
            Rule::StartRowNotBelowRows => write!(
                f,
                "start_row {v} is not below the {l} rows of tile t{t}; TILELOADD and TILESTORED raise #UD on that tile"
            ),
        }
    }
}

impl core::error::Error for Violation {}

/// A tile number past the palette's tile names (e.g. `t8` with palette 1). The image has no
/// slot for it, so it is not a [`Violation`] of an image but a mistake in naming a tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct NoSuchTile {
    /// The tile number asked for.
    pub tile: u64,
    /// The palette id.
    pub palette: u8,
    /// The palette's number of tile names.
    pub max_names: u16,
}

impl fmt::Display for NoSuchTile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (tile, palette) = (self.tile, self.palette);
        match (palette, self.max_names) {
            (0, _) => write!(f, "there is no tile t{tile}; palette 0 (INIT) has no tiles"),
            (_, 0) => write!(
                f,
                "there is no tile t{tile}; palette {palette} has no tiles"
            ),
            (_, 1) => write!(
                f,
                "there is no tile t{tile}; palette {palette} has 1 tile, t0 (max_names)"
            ),
            (_, names) => write!(
                f,
                "there is no tile t{tile}; palette {palette} has {names} tiles, t0 to t{} \
                 (max_names)",
                names - 1
            ),
        }
    }
}

impl core::error::Error for NoSuchTile {}
