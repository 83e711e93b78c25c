//! [`TileConfig`]: the 64-byte, 64-byte-aligned image that LDTILECFG reads.

use std::fmt;

use amx_tilecfg::{image, validate, NoSuchTile, PaletteTable, TileShape, Violation};

use crate::error::ConfigError;

/// A tile configuration: exactly the 64-byte memory image LDTILECFG reads, aligned to 64 bytes.
///
/// A `TileConfig` from the macro, [`TileConfig::from_bytes`] or the builder passes LDTILECFG's
/// load-time rules for the architectural palette table (palette 1: 8 tiles, 16 rows, 64 bytes per
/// row), so loading one never raises #GP on a CPU with that palette; one from
/// [`TileConfig::from_bytes_for`] passes the rules of the table it was checked against. Whatever
/// its origin, [`configure`](crate::configure) never lets a load fault: an image the CPU would
/// reject is an error. Build one with the `tilecfg!` macro (checked at compile time), with
/// [`TileConfig::from_bytes`] (checked like LDTILECFG), or with [`TileConfig::builder`] (checked
/// like the macro).
///
/// ```
/// use amx_runtime::{tilecfg, TileConfig};
///
/// static GEMM: TileConfig = tilecfg! { palette 1; t0: 16x64; t1: 16x16 i32 };
/// assert_eq!(GEMM.tile(1).unwrap().colsb, 64);
/// assert_eq!(GEMM.as_bytes().as_ptr() as usize % 64, 0);
/// ```
#[repr(C, align(64))]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TileConfig {
    bytes: [u8; 64],
}

const _: () = assert!(std::mem::size_of::<TileConfig>() == 64);
const _: () = assert!(std::mem::align_of::<TileConfig>() == 64);

impl TileConfig {
    /// The INIT configuration (palette 0): loading it releases the tiles.
    pub const INIT: TileConfig = TileConfig { bytes: [0; 64] };

    /// Wraps an image that the `tilecfg!` macro has already validated. Not for direct use: the
    /// macro is the only caller, and it calls this only with images that passed every rule.
    ///
    /// # Safety
    /// `bytes` passes every load-time rule of LDTILECFG for the architectural palette table
    /// (what [`TileConfig::from_bytes`] accepts): unsafe code may load any `TileConfig` without
    /// a check (e.g. [`_tile_loadconfig`](crate::intrinsics::_tile_loadconfig)), so an image
    /// that breaks a rule would make that load raise #GP.
    #[doc(hidden)]
    pub const unsafe fn __from_validated_bytes(bytes: [u8; 64]) -> TileConfig {
        TileConfig { bytes }
    }

    /// Parses a 64-byte image with exactly LDTILECFG's #GP rules for the architectural palette
    /// table: accepts what the silicon accepts, rejects what it rejects, listing every violation.
    ///
    /// Images the silicon accepts but whose tiles then #UD on use (a colsb that is not a multiple
    /// of 4, a start_row at or past a tile's rows) are accepted; [`TileConfig::use_violations`]
    /// lists them.
    ///
    /// ```
    /// use amx_runtime::TileConfig;
    ///
    /// let mut bytes = [0u8; 64];
    /// bytes[0] = 1; // palette 1
    /// bytes[16] = 64; // t0: 64 bytes per row
    /// bytes[48] = 17; // t0: 17 rows, one too many
    /// let err = TileConfig::from_bytes(&bytes).unwrap_err();
    /// assert_eq!(err.to_string(), "tile t0 has 17 rows; palette 1 allows at most 16 (max_rows)");
    /// ```
    pub fn from_bytes(bytes: &[u8; 64]) -> Result<TileConfig, ConfigError> {
        TileConfig::from_bytes_for(bytes, &PaletteTable::ARCHITECTURAL)
    }

    /// An image a tile unit accepted (its tracked state): it passed LDTILECFG's load-time rules
    /// for that unit's palette table, as [`TileConfig::from_bytes_for`] would check.
    pub(crate) const fn loaded(bytes: [u8; 64]) -> TileConfig {
        TileConfig { bytes }
    }

    /// [`TileConfig::from_bytes`] against another palette table (e.g. one read from CPUID).
    /// The result passes that table's load-time rules, which may be looser than the
    /// architectural ones; [`configure`](crate::configure) checks it against the CPU's table.
    ///
    /// An image with palette 0 is [`TileConfig::INIT`], all 64 bytes zero: LDTILECFG ignores
    /// every other byte of it
    /// ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
    /// L4), and one canonical INIT lets `configure` see
    /// that the thread already holds it.
    pub fn from_bytes_for(
        bytes: &[u8; 64],
        table: &PaletteTable,
    ) -> Result<TileConfig, ConfigError> {
        if image::palette_id(bytes) == 0 {
            return Ok(TileConfig::INIT);
        }
        let report = validate(bytes, table);
        let load: Vec<Violation> = report.load_violations().copied().collect();
        if load.is_empty() {
            Ok(TileConfig { bytes: *bytes })
        } else {
            Err(ConfigError::new(load))
        }
    }

    /// A builder that checks like the `tilecfg!` macro: load-time and use-time rules.
    pub fn builder() -> TileConfigBuilder {
        TileConfigBuilder {
            palette: 1,
            start_row: 0,
            shapes: [None; 8],
            missing: Vec::new(),
        }
    }

    /// The 64-byte image LDTILECFG reads.
    pub const fn as_bytes(&self) -> &[u8; 64] {
        &self.bytes
    }

    /// The palette id (0 is INIT).
    pub const fn palette(&self) -> u8 {
        image::palette_id(&self.bytes)
    }

    /// The start_row byte, as stored (LDTILECFG does not check it).
    pub const fn start_row(&self) -> u8 {
        image::start_row(&self.bytes)
    }

    /// Whether this is the INIT configuration (palette 0).
    pub const fn is_init(&self) -> bool {
        self.palette() == 0
    }

    /// The shape of tile `t`, or `None` when it is unused, `t >= 8`, or the config is INIT.
    pub const fn tile(&self, t: u8) -> Option<TileShape> {
        if t as usize >= image::TILE_SLOTS || self.is_init() {
            return None;
        }
        let shape = image::shape(&self.bytes, t);
        if shape.is_unused() {
            None
        } else {
            Some(shape)
        }
    }

    /// The use-time rules this configuration breaks: accepted by LDTILECFG, but TILELOADD,
    /// TILESTORED and TDP* raise #UD on the tiles concerned.
    pub fn use_violations(&self) -> Vec<Violation> {
        validate(&self.bytes, &PaletteTable::ARCHITECTURAL)
            .use_violations()
            .copied()
            .collect()
    }

    /// Checks this configuration against a CPU's palette table (load-time rules only); a
    /// configuration valid for palette 1 may be too big for a smaller palette.
    pub fn check_against(&self, table: &PaletteTable) -> Result<(), ConfigError> {
        TileConfig::from_bytes_for(&self.bytes, table).map(|_| ())
    }
}

impl Default for TileConfig {
    fn default() -> TileConfig {
        TileConfig::INIT
    }
}

/// Builds a [`TileConfig`] at run time with the `tilecfg!` macro's checks.
///
/// ```
/// use amx_runtime::{tilecfg, TileConfig};
///
/// let built = TileConfig::builder().tile(0, 16, 64).tile(3, 8, 32).build().unwrap();
/// assert_eq!(built, tilecfg! { palette 1; t0: 16x64; t3: 8x32 });
///
/// let err = TileConfig::builder().tile(2, 4, 6).build().unwrap_err();
/// assert!(err.to_string().starts_with("tile t2 has 6 bytes per row (colsb), not a multiple of 4"));
///
/// // A tile is left unused by leaving it out, as in the macro (`t1: 0 x 0` does not compile).
/// let err = TileConfig::builder().tile(0, 16, 64).tile(1, 0, 0).build().unwrap_err();
/// assert_eq!(err.unused_shapes(), &[1]);
/// assert_eq!(
///     err.to_string(),
///     "tile t1 is 0 x 0, the shape of an unused tile; leave t1 out to keep it unused"
/// );
///
/// assert_eq!(TileConfig::builder().palette(0).build().unwrap(), TileConfig::INIT);
/// let err = TileConfig::builder().palette(0).tile(0, 16, 64).build().unwrap_err();
/// assert_eq!(err.to_string(), "there is no tile t0; palette 0 (INIT) has no tiles");
/// ```
#[derive(Clone, Debug)]
pub struct TileConfigBuilder {
    palette: u8,
    start_row: u8,
    shapes: [Option<TileShape>; 8],
    missing: Vec<u8>,
}

impl TileConfigBuilder {
    /// Sets the palette id (default 1; 0 builds INIT).
    pub fn palette(mut self, id: u8) -> Self {
        self.palette = id;
        self
    }

    /// Sets start_row (default 0).
    pub fn start_row(mut self, row: u8) -> Self {
        self.start_row = row;
        self
    }

    /// Sets tile `t` to `rows` x `colsb` bytes. A tile number of 8 or more is reported by
    /// [`TileConfigBuilder::build`].
    pub fn tile(mut self, t: u8, rows: u8, colsb: u16) -> Self {
        match self.shapes.get_mut(t as usize) {
            Some(slot) => *slot = Some(TileShape::new(rows, colsb)),
            None => self.missing.push(t),
        }
        self
    }

    /// Validates (load-time and use-time rules) and builds the configuration. With palette 0
    /// the result is INIT, and a tile or a start_row set beside it is an error, as in the
    /// macro: LDTILECFG would ignore them, so they are a mistake.
    pub fn build(self) -> Result<TileConfig, ConfigError> {
        if self.palette == 0 {
            // Palette 0 has no tile names: every tile set is one it does not have.
            let set = (0..image::TILE_SLOTS as u8).filter(|&t| self.shapes[t as usize].is_some());
            let tiles = set.chain(self.missing.iter().copied()).map(|t| NoSuchTile {
                tile: u64::from(t),
                palette: 0,
                max_names: 0,
            });
            let err = ConfigError::with_missing(Vec::new(), tiles.collect());
            let err = match self.start_row {
                0 => err,
                row => err.with_start_row_under_init(row),
            };
            return if err.is_empty() {
                Ok(TileConfig::INIT)
            } else {
                Err(err)
            };
        }
        let bytes = image::encode(self.palette, self.start_row, &self.shapes);
        let report = validate(&bytes, &PaletteTable::ARCHITECTURAL);
        let names = PaletteTable::ARCHITECTURAL
            .get(1)
            .map_or(8, |p| p.max_names);
        let missing = self.missing.iter().map(|&t| NoSuchTile {
            tile: u64::from(t),
            palette: self.palette,
            max_names: names,
        });
        // A tile given 0 x 0 is one left unused by a mistake (the macro's rule).
        let unused = (0..image::TILE_SLOTS as u8)
            .filter(|&t| self.shapes[t as usize].is_some_and(TileShape::is_unused))
            .collect();
        let err = ConfigError::with_missing(report.iter().copied().collect(), missing.collect())
            .with_unused_shapes(unused);
        if err.is_empty() {
            Ok(TileConfig { bytes })
        } else {
            Err(err)
        }
    }
}

impl fmt::Display for TileConfig {
    /// Draws the configuration as a table of its used tiles.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_init() {
            return writeln!(f, "palette 0 (INIT: no tiles configured)");
        }
        writeln!(
            f,
            "palette {}, start_row {}",
            self.palette(),
            self.start_row()
        )?;
        writeln!(f, "tile  rows  colsb  bytes")?;
        for t in 0..image::TILE_SLOTS as u8 {
            if let Some(s) = self.tile(t) {
                writeln!(f, "t{t}    {:>4}  {:>5}  {:>5}", s.rows, s.colsb, s.bytes())?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for TileConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("TileConfig");
        d.field("palette", &self.palette());
        d.field("start_row", &self.start_row());
        for t in 0..image::TILE_SLOTS as u8 {
            if let Some(s) = self.tile(t) {
                d.field(
                    ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"][t as usize],
                    &format_args!("{s}"),
                );
            }
        }
        d.finish()
    }
}

/// The serialized form of a [`TileConfig`]: its palette, start_row and used tiles, so that a
/// configuration reads as what it is rather than as 64 bytes.
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Repr {
    palette: u8,
    #[serde(default)]
    start_row: u8,
    #[serde(default)]
    tiles: Vec<TileRepr>,
}

/// One used tile of a [`Repr`].
#[cfg(feature = "serde")]
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TileRepr {
    tile: u64,
    rows: u8,
    colsb: u16,
}

/// Serializes as `{"palette": 1, "start_row": 0, "tiles": [{"tile": 0, "rows": 16, "colsb":
/// 64}, ...]}`, listing the used tiles in order.
///
/// ```
/// use amx_runtime::{tilecfg, TileConfig};
///
/// let config = tilecfg! { palette 1; t0: 16x64; t3: 8x32 };
/// let json = serde_json::to_string(&config).unwrap();
/// assert_eq!(
///     json,
///     r#"{"palette":1,"start_row":0,"tiles":[{"tile":0,"rows":16,"colsb":64},{"tile":3,"rows":8,"colsb":32}]}"#
/// );
/// assert_eq!(serde_json::from_str::<TileConfig>(&json).unwrap(), config);
/// ```
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for TileConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let tiles = (0..image::TILE_SLOTS as u8).filter_map(|t| {
            self.tile(t).map(|s| TileRepr {
                tile: u64::from(t),
                rows: s.rows,
                colsb: s.colsb,
            })
        });
        Repr {
            palette: self.palette(),
            start_row: self.start_row(),
            tiles: tiles.collect(),
        }
        .serialize(serializer)
    }
}

/// Deserializes what [`Serialize`](serde::Serialize) writes, through the same rules as
/// [`TileConfig::from_bytes`] (LDTILECFG's, for the architectural palette table): a
/// configuration LDTILECFG would reject is a deserialize error naming every broken rule, never
/// a `TileConfig`. So are a tile past t7, a tile given twice, and a tile or start_row under
/// palette 0 (INIT has no tiles, as with the builder). A configuration that
/// [`TileConfig::from_bytes_for`] accepted for a larger palette table than the architectural
/// one does not deserialize.
///
/// ```
/// use amx_runtime::TileConfig;
///
/// let err = serde_json::from_str::<TileConfig>(
///     r#"{"palette":1,"tiles":[{"tile":2,"rows":17,"colsb":64}]}"#,
/// )
/// .unwrap_err();
/// assert!(err.to_string().starts_with("tile t2 has 17 rows; palette 1 allows at most 16"));
/// ```
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for TileConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let repr = Repr::deserialize(deserializer)?;
        let mut shapes = [None; image::TILE_SLOTS];
        let mut missing = Vec::new();
        for t in &repr.tiles {
            match shapes.get_mut(t.tile as usize) {
                Some(Some(_)) => {
                    return Err(D::Error::custom(format_args!(
                        "tile t{} is given twice",
                        t.tile
                    )))
                }
                Some(slot) if t.tile < image::TILE_SLOTS as u64 => {
                    *slot = Some(TileShape::new(t.rows, t.colsb))
                }
                _ => missing.push(t.tile),
            }
        }
        if repr.palette == 0 || !missing.is_empty() {
            // The tile names the palette lacks, worded as the builder words them.
            let max_names = if repr.palette == 0 { 0 } else { 8 };
            let listed = (0..image::TILE_SLOTS as u64).filter(|&t| shapes[t as usize].is_some());
            let tiles = missing
                .iter()
                .copied()
                .chain(listed.filter(|_| repr.palette == 0))
                .map(|tile| NoSuchTile {
                    tile,
                    palette: repr.palette,
                    max_names,
                });
            let err = ConfigError::with_missing(Vec::new(), tiles.collect());
            let err = match repr.start_row {
                row @ 1.. if repr.palette == 0 => err.with_start_row_under_init(row),
                _ => err,
            };
            return if err.is_empty() {
                Ok(TileConfig::INIT)
            } else {
                Err(D::Error::custom(err))
            };
        }
        let bytes = image::encode(repr.palette, repr.start_row, &shapes);
        TileConfig::from_bytes(&bytes).map_err(D::Error::custom)
    }
}

#[cfg(all(test, feature = "serde"))]
mod serde_tests {
    use super::*;
    use crate::tilecfg;

    fn round_trip(config: TileConfig) {
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            serde_json::from_str::<TileConfig>(&json).unwrap(),
            config,
            "{json}"
        );
    }

    #[test]
    fn configurations_round_trip() {
        round_trip(TileConfig::INIT);
        round_trip(tilecfg! { palette 1; t0: 16x16 i32; t4: 16x64; t6: 16x64; t7: 1x4 });
        // What LDTILECFG accepts but a tile instruction refuses still round-trips: the rules
        // are from_bytes's.
        let mut bytes = [0u8; 64];
        bytes[0] = 1;
        bytes[1] = 9; // start_row past t2's rows
        bytes[16 + 4] = 6; // t2 colsb 6
        bytes[48 + 2] = 3;
        let odd = TileConfig::from_bytes(&bytes).unwrap();
        assert!(!odd.use_violations().is_empty());
        round_trip(odd);
        assert_eq!(
            serde_json::to_string(&TileConfig::INIT).unwrap(),
            r#"{"palette":0,"start_row":0,"tiles":[]}"#
        );
    }

    #[test]
    fn invalid_configurations_do_not_deserialize() {
        let refused = |json: &str| match serde_json::from_str::<TileConfig>(json) {
            Ok(config) => panic!("{json} gave {config:?}"),
            Err(e) => e.to_string(),
        };
        let err = refused(r#"{"palette":1,"tiles":[{"tile":0,"rows":16,"colsb":65}]}"#);
        assert!(err.contains("allows at most 64 (bytes_per_row)"), "{err}");
        let err = refused(r#"{"palette":2,"tiles":[]}"#);
        assert!(err.contains("palette 2 is not supported"), "{err}");
        let err = refused(r#"{"palette":1,"tiles":[{"tile":1,"rows":0,"colsb":64}]}"#);
        assert!(err.contains("0 rows"), "{err}");
        let err = refused(r#"{"palette":1,"tiles":[{"tile":8,"rows":16,"colsb":64}]}"#);
        assert!(
            err.starts_with("there is no tile t8; palette 1 has 8 tiles"),
            "{err}"
        );
        let err = refused(
            r#"{"palette":1,"tiles":[{"tile":1,"rows":1,"colsb":4},{"tile":1,"rows":2,"colsb":4}]}"#,
        );
        assert!(err.starts_with("tile t1 is given twice"), "{err}");
        let err = refused(r#"{"palette":0,"tiles":[{"tile":0,"rows":16,"colsb":64}]}"#);
        assert!(
            err.starts_with("there is no tile t0; palette 0 (INIT)"),
            "{err}"
        );
        let err = refused(r#"{"palette":0,"start_row":3}"#);
        assert!(err.starts_with("start_row 3 under palette 0"), "{err}");
        let err = refused(r#"{"palette":1,"bytes":[]}"#);
        assert!(err.contains("unknown field `bytes`"), "{err}");
    }

    #[test]
    fn reports_round_trip() {
        use crate::permit::PermissionState;
        use crate::{Backend, BackendChoice, Capabilities, Counters, Unavailable};
        let caps: Capabilities = crate::detect();
        let json = serde_json::to_string(&caps).unwrap();
        assert_eq!(serde_json::from_str::<Capabilities>(&json).unwrap(), caps);
        for state in [
            PermissionState::Granted,
            PermissionState::Unknown { errno: 22 },
        ] {
            let json = serde_json::to_string(&state).unwrap();
            assert_eq!(
                serde_json::from_str::<PermissionState>(&json).unwrap(),
                state
            );
        }
        assert_eq!(
            serde_json::to_string(&PermissionState::NotRequested).unwrap(),
            r#""not_requested""#
        );
        let why = Unavailable::OsDisabled { xcr0: Some(0xe7) };
        let json = serde_json::to_string(&why).unwrap();
        assert_eq!(serde_json::from_str::<Unavailable>(&json).unwrap(), why);
        // Backends read as `AMX_BACKEND` spells them.
        assert_eq!(
            serde_json::to_string(&Backend::Emulated).unwrap(),
            r#""emulated""#
        );
        assert_eq!(
            serde_json::from_str::<BackendChoice>(r#""trapped""#).unwrap(),
            BackendChoice::Trapped
        );
        let counters = Counters {
            loads: 3,
            skipped: 2,
            releases: 1,
        };
        let json = serde_json::to_string(&counters).unwrap();
        assert_eq!(serde_json::from_str::<Counters>(&json).unwrap(), counters);
    }
}
