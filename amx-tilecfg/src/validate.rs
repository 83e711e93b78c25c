//! `validate`: every rule applied to one 64-byte image, every violation reported.

use crate::image::{self, SIZE, TILE_SLOTS};
use crate::palette::PaletteTable;
use crate::rules::{Rule, RuleKind, Violation};

/// More violations than any image can have (38 reserved bytes, 8 tiles x 4, palette).
pub const CAPACITY: usize = 80;

/// Every violation found in one image. A fixed-capacity list, so the rules stay `no_std` and
/// allocation-free.
///
/// The order is fixed: the load-time violations first (the palette id, the reserved bytes in
/// byte order, then tile by tile from t0, each tile's colsb before its rows), then the use-time
/// ones (tile by tile, colsb % 4 before start_row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    items: [Option<Violation>; CAPACITY],
    len: usize,
}

impl Report {
    const fn new() -> Report {
        Report {
            items: [None; CAPACITY],
            len: 0,
        }
    }

    fn push(&mut self, v: Violation) {
        // CAPACITY bounds the number of rules times fields; the assertion documents it.
        debug_assert!(self.len < CAPACITY);
        if let Some(slot) = self.items.get_mut(self.len) {
            *slot = Some(v);
            self.len += 1;
        }
    }

    /// Number of violations.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the image breaks no rule at all.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every violation, load-time ones first.
    pub fn iter(&self) -> impl Iterator<Item = &Violation> + '_ {
        self.items[..self.len].iter().flatten()
    }

    /// Whether LDTILECFG accepts the image (no load-time violation): the #GP question.
    pub fn is_loadable(&self) -> bool {
        self.load_violations().next().is_none()
    }

    /// The violations LDTILECFG answers with #GP.
    pub fn load_violations(&self) -> impl Iterator<Item = &Violation> + '_ {
        self.iter().filter(|v| v.kind() == RuleKind::Load)
    }

    /// The violations that make tile instructions raise #UD after a successful load.
    pub fn use_violations(&self) -> impl Iterator<Item = &Violation> + '_ {
        self.iter().filter(|v| v.kind() == RuleKind::Use)
    }
}

/// Applies every rule to `image` against the palette `table`.
///
/// Palette 0 is the INIT configuration: the silicon ignores every other byte, so the report is
/// empty whatever they hold. For any other palette the report lists every load-time violation
/// (what LDTILECFG answers with #GP) and every use-time one (accepted by LDTILECFG, #UD on use).
pub fn validate(image: &[u8; SIZE], table: &PaletteTable) -> Report {
    let mut report = Report::new();
    let pid = image::palette_id(image);
    if pid == 0 {
        return report;
    }
    let palette = table.get(pid);
    if palette.is_none() {
        report.push(Violation {
            rule: Rule::PaletteUnsupported,
            tile: None,
            offset: image::PALETTE_ID as u8,
            value: pid as u32,
            limit: table.max_palette() as u32,
            palette: pid,
        });
    }
    let base = Violation {
        rule: Rule::ReservedNonZero,
        tile: None,
        offset: 0,
        value: 0,
        limit: 0,
        palette: pid,
    };
    for range in image::RESERVED {
        for offset in range {
            if image[offset] != 0 {
                report.push(Violation {
                    offset: offset as u8,
                    value: image[offset] as u32,
                    ..base
                });
            }
        }
    }
    // Without the palette's limits nothing more can be said about the tiles.
    let Some(palette) = palette else {
        return report;
    };
    let names = palette.names();
    for t in 0..TILE_SLOTS as u8 {
        let (rows, colsb) = (image::rows(image, t), image::colsb(image, t));
        let tile = Violation {
            tile: Some(t),
            ..base
        };
        let at_colsb = Violation {
            offset: image::colsb_offset(t) as u8,
            value: colsb as u32,
            ..tile
        };
        let at_rows = Violation {
            offset: image::rows_offset(t) as u8,
            value: rows as u32,
            ..tile
        };
        if t as usize >= names {
            for (v, nonzero) in [(at_colsb, colsb != 0), (at_rows, rows != 0)] {
                if nonzero {
                    report.push(Violation {
                        rule: Rule::TileBeyondNames,
                        limit: palette.max_names as u32,
                        ..v
                    });
                }
            }
            continue;
        }
        if colsb > palette.bytes_per_row {
            report.push(Violation {
                rule: Rule::ColsbTooLarge,
                limit: palette.bytes_per_row as u32,
                ..at_colsb
            });
        }
        if rows as u16 > palette.max_rows {
            report.push(Violation {
                rule: Rule::RowsTooLarge,
                limit: palette.max_rows as u32,
                ..at_rows
            });
        }
        if rows != 0 && colsb == 0 {
            report.push(Violation {
                rule: Rule::RowsWithoutColsb,
                ..at_rows
            });
        }
        if rows == 0 && colsb != 0 {
            report.push(Violation {
                rule: Rule::ColsbWithoutRows,
                ..at_colsb
            });
        }
    }
    // Use-time rules, checked only on tiles that exist in the palette.
    let start_row = image::start_row(image);
    for t in 0..names as u8 {
        let (rows, colsb) = (image::rows(image, t), image::colsb(image, t));
        if colsb % 4 != 0 {
            report.push(Violation {
                rule: Rule::ColsbNotMultipleOf4,
                tile: Some(t),
                offset: image::colsb_offset(t) as u8,
                value: colsb as u32,
                limit: 4,
                palette: pid,
            });
        }
        if rows != 0 && colsb != 0 && start_row >= rows {
            report.push(Violation {
                rule: Rule::StartRowNotBelowRows,
                tile: Some(t),
                offset: image::START_ROW as u8,
                value: start_row as u32,
                limit: rows as u32,
                palette: pid,
            });
        }
    }
    report
}
