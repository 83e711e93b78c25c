//! Meaning: the statements of a [`Config`] to the 64-byte LDTILECFG image, and for every field of
//! the image the token that produced it.
//!
//! The mistakes found here are the ones the image cannot express: a missing or misplaced
//! `palette`, a key or a tile name given twice, a tile number past the image, a number too wide
//! for its field, tiles under palette 0. Whether the image itself is valid is not decided here:
//! that is `amx_tilecfg::validate`'s job.

use std::collections::HashMap;

use amx_tilecfg::{image, ElemType, NoSuchTile, Palette, PaletteTable, TileShape};

use crate::ast::{Config, Setting, Stmt, Tile};
use crate::diag::{self, Site};
use syn::ext::IdentExt;

/// The image, the tokens behind its fields, and the mistakes found while building it.
pub struct Lowered {
    /// The image, or `None` when its palette is unknown (missing, or too big for the byte), so
    /// that no rule can be checked.
    pub image: Option<[u8; image::SIZE]>,
    /// Where each field of the image came from.
    pub sites: Sites,
    /// The mistakes, in source order.
    pub errors: Vec<syn::Error>,
}

/// The token behind each field of the image that the user wrote.
#[derive(Default)]
pub struct Sites {
    /// The palette id (byte 0).
    pub palette: Option<FieldSite>,
    /// start_row (byte 1).
    pub start_row: Option<FieldSite>,
    /// Each tile's rows and colsb.
    pub tiles: [Option<TileSites>; image::TILE_SLOTS],
}

/// The token behind one field.
pub struct FieldSite {
    /// The token(s).
    pub site: Site,
    /// Whether the number written did not fit the field (its value in the image is clamped and
    /// its violations are not reported again).
    pub overflowed: bool,
}

/// The tokens behind one tile's fields.
pub struct TileSites {
    /// The rows number.
    pub rows: FieldSite,
    /// The columns, and the element type if written.
    pub colsb: FieldSite,
    /// For typed columns, the element count and type (to explain the bytes in messages).
    pub elems: Option<(u128, ElemType)>,
}

/// The palette table the macro checks against.
pub const TABLE: PaletteTable = PaletteTable::ARCHITECTURAL;

/// Builds the image of `config`, recording where each field came from.
pub fn lower(config: &Config) -> Lowered {
    let mut errors = Vec::new();
    let mut sites = Sites::default();

    let palette = setting(config, Stmt::palette, "`palette`", &mut errors);
    let start_row = setting(config, Stmt::start_row, "`start_row`", &mut errors);

    // palette: present, first, and one byte wide.
    let palette_id = match palette {
        None => {
            // After a syntax error the palette may be in the statement that failed: say nothing.
            if config.errors.is_empty() {
                let span = config.stmts.first().and_then(Stmt::key_span);
                let span = span.unwrap_or_else(proc_macro2::Span::call_site);
                errors.push(syn::Error::new(span, diag::missing_palette()));
            }
            None
        }
        Some(palette) => {
            let first = config.stmts.first();
            let palette_first = matches!(first, Some(Stmt::Palette(_)) | Some(Stmt::Invalid));
            if !palette_first {
                errors.push(
                    palette
                        .site()
                        .error(diag::palette_not_first(&palette.text())),
                );
            }
            let id = u8::try_from(palette.value.value).ok();
            if id.is_none() {
                let message = diag::palette_overflow(&palette.value.text);
                errors.push(syn::Error::new(palette.value.span, message));
            }
            sites.palette = Some(FieldSite {
                site: Site::from(palette.value.span),
                overflowed: id.is_none(),
            });
            id
        }
    };

    // start_row: one byte wide, meaningless under palette 0.
    let start_row_value = match start_row {
        None => 0,
        Some(start_row) => {
            if palette_id == Some(0) {
                errors.push(
                    start_row
                        .site()
                        .error(diag::init_with_start_row(&start_row.text())),
                );
            }
            if config.header.is_some() && start_row.value.value != 0 {
                errors.push(
                    start_row
                        .site()
                        .error(diag::start_row_in_layout(&start_row.text())),
                );
            }
            let value = u8::try_from(start_row.value.value).ok();
            if value.is_none() {
                let message = diag::start_row_overflow(&start_row.value.text);
                errors.push(syn::Error::new(start_row.value.span, message));
            }
            sites.start_row = Some(FieldSite {
                site: Site::from(start_row.value.span),
                overflowed: value.is_none(),
            });
            value.unwrap_or(u8::MAX)
        }
    };

    // Tiles: each once, each in the image, each field within its width.
    let mut shapes = [None; image::TILE_SLOTS];
    let mut first_site: [Option<&Tile>; image::TILE_SLOTS] = [None; image::TILE_SLOTS];
    for tile in config.stmts.iter().filter_map(Stmt::tile) {
        if palette_id == Some(0) {
            errors.push(tile.site().error(diag::init_with_tile(&tile_text(tile))));
            continue;
        }
        let slot = usize::try_from(tile.index)
            .ok()
            .filter(|&t| t < image::TILE_SLOTS);
        let Some(t) = slot else {
            errors.push(syn::Error::new(
                tile.key.span(),
                no_such_tile(tile.index, palette_id),
            ));
            continue;
        };
        if let Some(first) = first_site[t] {
            let what = format!("tile {}", tile.key);
            errors.push(tile.site().error(diag::duplicate(&what)));
            errors.push(first.site().error(diag::first_given(&what)));
            continue;
        }
        first_site[t] = Some(tile);
        if let Some((shape, tile_sites)) = lower_tile(tile, &mut errors) {
            shapes[t] = Some(shape);
            sites.tiles[t] = Some(tile_sites);
        }
    }

    check_names(config, &mut errors);

    Lowered {
        image: palette_id.map(|p| image::encode(p, start_row_value, &shapes)),
        sites,
        errors,
    }
}

/// The single statement of one key; a second one is an error at both sites.
fn setting<'a>(
    config: &'a Config,
    select: fn(&Stmt) -> Option<&Setting>,
    what: &str,
    errors: &mut Vec<syn::Error>,
) -> Option<&'a Setting> {
    let mut all = config.stmts.iter().filter_map(select);
    let first = all.next()?;
    for again in all {
        errors.push(again.site().error(diag::duplicate(what)));
        errors.push(first.site().error(diag::first_given(what)));
    }
    Some(first)
}

/// One tile's shape in bytes, or `None` when it cannot be one (`0 x 0`).
fn lower_tile(tile: &Tile, errors: &mut Vec<syn::Error>) -> Option<(TileShape, TileSites)> {
    let shape = &tile.shape;
    let (rows, cols) = (shape.rows.value, shape.cols.value);
    if rows == 0 && cols == 0 {
        errors.push(
            shape
                .site()
                .error(diag::unused_shape(&tile.key, &shape.text())),
        );
        return None;
    }
    let size = shape.elem.as_ref().map_or(1, |e| u128::from(e.ty.size()));
    let colsb = cols.checked_mul(size);

    let rows_fit = u8::try_from(rows).ok();
    if rows_fit.is_none() {
        let message = diag::rows_overflow(&tile.key, &shape.rows.text);
        errors.push(syn::Error::new(shape.rows.span, message));
    }
    let colsb_fit = colsb.and_then(|b| u16::try_from(b).ok());
    if colsb_fit.is_none() {
        let bytes = colsb.map_or_else(
            || format!("{} x {size}", shape.cols.text),
            |b| b.to_string(),
        );
        let elem = shape.elem.as_ref().map(|e| e.ty);
        let message = diag::colsb_overflow(&tile.key, &shape.cols.text, elem, &bytes);
        errors.push(shape.columns_site().error(message));
    }

    let sites = TileSites {
        rows: FieldSite {
            site: Site::from(shape.rows.span),
            overflowed: rows_fit.is_none(),
        },
        colsb: FieldSite {
            site: shape.columns_site(),
            overflowed: colsb_fit.is_none(),
        },
        elems: shape.elem.as_ref().map(|e| (cols, e.ty)),
    };
    let shape = TileShape::new(rows_fit.unwrap_or(u8::MAX), colsb_fit.unwrap_or(u16::MAX));
    Some((shape, sites))
}

/// Tile names: each names one tile, none is a tile register's name, and in a layout none is
/// taken by the layout's own items or is a keyword of a later edition. A raw identifier
/// (`r#a`) is the same name as `a`.
fn check_names(config: &Config, errors: &mut Vec<syn::Error>) {
    let mut named: HashMap<String, &Tile> = HashMap::new();
    for tile in config.stmts.iter().filter_map(Stmt::tile) {
        let Some(name) = &tile.name else { continue };
        // Only the item form turns a name into a handle; in the expression form nothing could
        // refer to it. (An item form whose header failed to parse has its own error.)
        if !config.item_form {
            errors.push(syn::Error::new(
                name.span(),
                diag::name_outside_layout(name, &tile.key),
            ));
            continue;
        }
        let layout = config.header.as_ref().map(|h| &h.ident);
        if let Some(message) = name_problem(name, &tile.key, layout) {
            errors.push(syn::Error::new(name.span(), message));
            continue;
        }
        let text = name.unraw().to_string();
        match named.get(&text) {
            // The same tile given twice, under the same name: that is one mistake, reported as
            // the tile given twice.
            Some(first) if first.index == tile.index => {}
            Some(first) => {
                let first_name = first.name.as_ref().expect("only named tiles are recorded");
                errors.push(syn::Error::new(
                    name.span(),
                    diag::duplicate_name(name, &first.key),
                ));
                errors.push(syn::Error::new(
                    first_name.span(),
                    diag::first_name(first_name, &first.key),
                ));
            }
            None => {
                named.insert(text, tile);
            }
        }
    }
}

/// The items a layout declares besides its handles (see `layout::items`).
const LAYOUT_ITEMS: [&str; 2] = ["CONFIG", "configure"];

/// Why tile `key` cannot be named `name`, or `None` when it can: never a register's name, and
/// in a layout (`layout` is its type) not one of the layout's own items nor a plain `gen`.
/// `check_names` reports it; the item form declares no handle for such a name.
pub fn name_problem(
    name: &syn::Ident,
    key: &syn::Ident,
    layout: Option<&syn::Ident>,
) -> Option<String> {
    let text = name.unraw().to_string();
    if crate::ast::tile_index(&text).is_some() {
        return Some(diag::register_name(name, key));
    }
    let layout = layout?;
    if LAYOUT_ITEMS.contains(&text.as_str()) {
        return Some(diag::reserved_name(&text, key, layout));
    }
    // `gen` written raw is fine in every edition; written plainly it is an identifier to a
    // 2021 crate but does not parse as a constant's name in a 2024 crate.
    (name == "gen").then(|| diag::keyword_name(&text, key))
}

/// The rules crate's sentence for a tile number past the image, under the palette written (or
/// palette 1 when that one is unknown or unsupported).
fn no_such_tile(tile: u64, palette_id: Option<u8>) -> NoSuchTile {
    let known = palette_id.and_then(|p| Some((p, TABLE.get(p)?)));
    let (palette, limits) = known.unwrap_or((1, &Palette::PALETTE_1));
    NoSuchTile {
        tile,
        palette,
        max_names: limits.max_names,
    }
}

/// A tile statement as the user wrote it, for messages: `t0 as a: 16x64`.
fn tile_text(tile: &Tile) -> String {
    match &tile.name {
        Some(name) => format!("{} as {name}: {}", tile.key, tile.shape.text()),
        None => format!("{}: {}", tile.key, tile.shape.text()),
    }
}

impl Stmt {
    fn palette(&self) -> Option<&Setting> {
        match self {
            Stmt::Palette(s) => Some(s),
            _ => None,
        }
    }

    fn start_row(&self) -> Option<&Setting> {
        match self {
            Stmt::StartRow(s) => Some(s),
            _ => None,
        }
    }

    fn tile(&self) -> Option<&Tile> {
        match self {
            Stmt::Tile(t) => Some(t),
            _ => None,
        }
    }

    fn key_span(&self) -> Option<proc_macro2::Span> {
        match self {
            Stmt::Palette(s) | Stmt::StartRow(s) => Some(s.key.span()),
            Stmt::Tile(t) => Some(t.key.span()),
            Stmt::Invalid => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lowered(input: &str) -> Lowered {
        let config = crate::ast::parse(input.parse().expect("tokens"));
        assert!(config.errors.is_empty(), "a syntax error in {input}");
        lower(&config)
    }

    fn messages(lowered: &Lowered) -> Vec<String> {
        lowered.errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn statements_become_the_image_bytes() {
        let out = lowered("palette 1; start_row 3; t5: 7x12 f32; t0: 16 x 64");
        assert!(out.errors.is_empty(), "{:?}", messages(&out));
        let image = out.image.expect("an image");
        let mut expected = [0u8; image::SIZE];
        expected[0] = 1;
        expected[1] = 3;
        (expected[16], expected[48]) = (64, 16);
        (expected[26], expected[53]) = (48, 7);
        assert_eq!(image, expected);
        // Each field keeps the token it came from; typed columns keep their element count.
        assert!(out.sites.palette.is_some() && out.sites.start_row.is_some());
        let t5 = out.sites.tiles[5].as_ref().expect("t5's sites");
        assert_eq!(t5.elems, Some((12, ElemType::F32)));
        assert!(!t5.rows.overflowed && !t5.colsb.overflowed);
        assert!(out.sites.tiles[1].is_none());
    }

    #[test]
    fn the_palette_is_required_first_and_one_byte() {
        let missing = lowered("t0: 16x64");
        assert_eq!(messages(&missing), [diag::missing_palette()]);
        assert!(missing.image.is_none());

        let late = lowered("t0: 16x64; palette 1");
        assert_eq!(messages(&late), [diag::palette_not_first("palette 1")]);
        assert!(late.image.is_some());

        let wide = lowered("palette 256; t0: 16x64");
        assert_eq!(messages(&wide), [diag::palette_overflow("256")]);
        assert!(wide.image.is_none());
        assert!(wide.sites.palette.as_ref().is_some_and(|p| p.overflowed));
    }

    #[test]
    fn a_key_or_tile_given_twice_is_reported_at_both_places() {
        let out = lowered("palette 1; palette 1; t0: 16x64; t0: 8x64");
        assert_eq!(
            messages(&out),
            [
                diag::duplicate("`palette`"),
                diag::first_given("`palette`"),
                diag::duplicate("tile t0"),
                diag::first_given("tile t0"),
            ]
        );
        // The first statement is the one in the image.
        assert_eq!(out.image.map(|i| i[48]), Some(16));
    }

    #[test]
    fn tiles_past_the_image_and_under_palette_0_are_refused() {
        let past = lowered("palette 1; t8: 16x64; t100: 1x4");
        assert_eq!(
            messages(&past),
            [
                "there is no tile t8; palette 1 has 8 tiles, t0 to t7 (max_names)",
                "there is no tile t100; palette 1 has 8 tiles, t0 to t7 (max_names)",
            ]
        );

        let init = lowered("palette 0; start_row 1; t0: 16x64");
        assert_eq!(
            messages(&init),
            [
                diag::init_with_start_row("start_row 1"),
                diag::init_with_tile("t0: 16x64"),
            ]
        );
        // Palette 0 with the rest as written: LDTILECFG ignores it (and the messages say so).
        let mut expected = [0u8; image::SIZE];
        expected[1] = 1;
        assert_eq!(init.image, Some(expected));
    }

    #[test]
    fn numbers_too_wide_for_their_fields_are_clamped_and_flagged() {
        let out = lowered("palette 1; start_row 300; t0: 256x4; t1: 1x40000 i32; t2: 0 x 0");
        assert_eq!(
            messages(&out),
            [
                diag::start_row_overflow("300"),
                diag::rows_overflow(
                    &syn::Ident::new("t0", proc_macro2::Span::call_site()),
                    "256"
                ),
                diag::colsb_overflow(
                    &syn::Ident::new("t1", proc_macro2::Span::call_site()),
                    "40000",
                    Some(ElemType::I32),
                    "160000"
                ),
                diag::unused_shape(
                    &syn::Ident::new("t2", proc_macro2::Span::call_site()),
                    "0x0"
                ),
            ]
        );
        let image = out.image.expect("an image");
        assert_eq!((image[1], image[48]), (u8::MAX, u8::MAX));
        assert_eq!(u16::from_le_bytes([image[18], image[19]]), u16::MAX);
        assert!(out.sites.start_row.as_ref().is_some_and(|s| s.overflowed));
        assert!(out.sites.tiles[0]
            .as_ref()
            .is_some_and(|t| t.rows.overflowed));
        assert!(out.sites.tiles[1]
            .as_ref()
            .is_some_and(|t| t.colsb.overflowed));
        assert!(out.sites.tiles[2].is_none());
    }

    #[test]
    fn tile_names_are_checked() {
        let out = lowered("struct K; palette 1; t0 as a: 1x4; t1 as r#a: 1x4; t2 as t3: 1x4");
        let found = messages(&out);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].starts_with("tile name `r#a` is given twice"),
            "{found:?}"
        );
        assert!(
            found[1].starts_with("tile name `a` first names tile t0"),
            "{found:?}"
        );
        assert!(
            found[2].contains("the name of a tile register"),
            "{found:?}"
        );
        // The same tile and name twice is one mistake: the tile given twice.
        let twice = lowered("struct K; palette 1; t0 as a: 1x4; t0 as a: 1x4");
        assert_eq!(messages(&twice).len(), 2);

        let layout = lowered("struct L; palette 1; t0 as CONFIG: 1x4; t1 as gen: 1x4; start_row 1");
        let found = messages(&layout);
        assert!(found.iter().any(|m| m.contains("`L::CONFIG`")), "{found:?}");
        assert!(
            found
                .iter()
                .any(|m| m.contains("a keyword since Rust 2024")),
            "{found:?}"
        );
        assert!(
            found
                .iter()
                .any(|m| m.starts_with("`start_row 1` in a layout")),
            "{found:?}"
        );
        // Outside a layout a name is refused, whatever it is: nothing could use it.
        let found = messages(&lowered("palette 1; t0 as CONFIG: 1x4; t1 as c: 1x4"));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found
                .iter()
                .all(|m| m.contains("only the item form declares typed handles")),
            "{found:?}"
        );
    }
}
