//! Typed errors: configuration errors, instruction faults, and why AMX is unavailable.

use std::fmt;

use amx_tilecfg::{NoSuchTile, Violation};

/// A tile configuration broke one or more rules.
///
/// Prints the same sentences as the `tilecfg!` compile errors, one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    violations: Vec<Violation>,
    missing: Vec<NoSuchTile>,
    start_row_under_init: Option<u8>,
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
        }
    }

    /// The builder's palette 0 with a start_row, which LDTILECFG would ignore.
    pub(crate) fn with_start_row_under_init(mut self, start_row: u8) -> ConfigError {
        self.start_row_under_init = Some(start_row);
        self
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.violations.is_empty() && self.missing.is_empty() && self.start_row_under_init.is_none()
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
        let sentences = init
            .iter()
            .map(|s| s as &dyn fmt::Display)
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
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// #GP(0): LDTILECFG of an image that breaks a load-time rule (SIGSEGV on Linux).
    GeneralProtection(String),
    /// #UD: a tile instruction on an unconfigured or unused tile, or with operands that do not
    /// fit (SIGILL on Linux).
    InvalidOpcode(String),
    /// Not a CPU exception: the rows the instruction would touch do not lie inside the slice
    /// passed to a safe load or store (on the silicon this would read or write out of bounds).
    OutOfBounds {
        /// The tile being loaded or stored.
        tile: u8,
        /// Bytes the instruction needs (offset of the last byte touched, plus one).
        needed: usize,
        /// Bytes the slice has.
        len: usize,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::GeneralProtection(why) => write!(f, "#GP: {why}"),
            Fault::InvalidOpcode(why) => write!(f, "#UD: {why}"),
            Fault::OutOfBounds { tile, needed, len } => write!(
                f,
                "tile t{tile} would touch {needed} bytes of memory, but the slice has only {len}"
            ),
        }
    }
}

impl std::error::Error for Fault {}
