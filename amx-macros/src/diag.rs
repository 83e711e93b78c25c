//! Diagnostics: every message `tilecfg!` can print, and each rule violation put on its token.
//!
//! The rules themselves and their sentences live in `amx_tilecfg`; this file only decides *where*
//! a [`Violation`] points (the token that produced the field) and holds the messages of the
//! mistakes that exist only in the DSL (syntax, duplicates, numbers that do not fit a field).
//! Messages are lowercase, quote the user's syntax and end without a period.

use std::fmt::Display;

use amx_tilecfg::{ElemType, Field, Report, Rule, Violation};
use proc_macro2::{Ident, Punct, Spacing, Span, TokenStream};
use quote::{ToTokens, TokenStreamExt};

use crate::lower::{FieldSite, Sites};

/// A range of source tokens an error points at, from `start` to `end` (the same span for one
/// token). Stable Rust cannot join spans; syn's `Error::new_spanned` covers a range by its first
/// and last token, which this type supplies.
#[derive(Clone, Copy, Debug)]
pub struct Site {
    /// The first token.
    pub start: Span,
    /// The last token.
    pub end: Span,
}

impl Site {
    /// The tokens from `start` to `end`.
    pub fn range(start: Span, end: Span) -> Site {
        Site { start, end }
    }

    /// An error covering this site.
    pub fn error(self, message: impl Display) -> syn::Error {
        syn::Error::new_spanned(self, message)
    }
}

impl From<Span> for Site {
    fn from(span: Span) -> Site {
        Site::range(span, span)
    }
}

impl ToTokens for Site {
    fn to_tokens(&self, tokens: &mut TokenStream) {
        let mut start = Punct::new('<', Spacing::Alone);
        start.set_span(self.start);
        tokens.append(start);
        tokens.append(Ident::new("site", self.end));
    }
}

/// All errors as one (shown together, each at its own site), or `None` when there are none.
pub fn combine(errors: impl IntoIterator<Item = syn::Error>) -> Option<syn::Error> {
    errors.into_iter().reduce(|mut all, next| {
        all.combine(next);
        all
    })
}

/// One error per violation in `report`, each on the token that produced the field, with the
/// rules crate's sentence. A violation about a number that did not fit its field is skipped:
/// that mistake is already reported, and the clamped value is not what the user wrote.
pub fn violations(report: &Report, sites: &Sites) -> Vec<syn::Error> {
    report
        .iter()
        .filter(|v| !about_overflow(v, sites))
        .map(|v| {
            // Every field the DSL can write has a site; should one ever lack it, the error still
            // goes out (on the whole invocation), so an invalid image is never expanded.
            let site = site_of(v, sites).map_or_else(|| Site::from(Span::call_site()), |s| s.site);
            site.error(message(v, sites))
        })
        .collect()
}

/// Whether a violation's value or limit is a number that overflowed its field.
fn about_overflow(v: &Violation, sites: &Sites) -> bool {
    let overflowed = |site: Option<&FieldSite>| site.is_some_and(|s| s.overflowed);
    let tile = v
        .tile
        .and_then(|t| sites.tiles.get(usize::from(t))?.as_ref());
    match v.field() {
        Field::PaletteId => overflowed(sites.palette.as_ref()),
        // The limit of this rule is the tile's rows.
        Field::StartRow => {
            overflowed(sites.start_row.as_ref()) || overflowed(tile.map(|t| &t.rows))
        }
        Field::Rows => overflowed(tile.map(|t| &t.rows)),
        Field::Colsb => overflowed(tile.map(|t| &t.colsb)),
        Field::Reserved => false,
    }
}

/// The token behind the field a violation is about.
fn site_of<'a>(v: &Violation, sites: &'a Sites) -> Option<&'a FieldSite> {
    let tile = || {
        let t = usize::from(v.tile?);
        sites.tiles.get(t)?.as_ref()
    };
    match (v.rule, v.field()) {
        (_, Field::PaletteId) => sites.palette.as_ref(),
        (_, Field::StartRow) => sites.start_row.as_ref(),
        // A tile with rows but no colsb, or colsb but no rows: point at the zero.
        (Rule::RowsWithoutColsb, _) => tile().map(|t| &t.colsb),
        (Rule::ColsbWithoutRows, _) => tile().map(|t| &t.rows),
        (_, Field::Rows) => tile().map(|t| &t.rows),
        (_, Field::Colsb) => tile().map(|t| &t.colsb),
        // The DSL cannot write a reserved byte.
        (_, Field::Reserved) => None,
    }
}

/// The rules crate's sentence, plus, for a colsb written as typed elements, how the bytes came
/// about.
fn message(v: &Violation, sites: &Sites) -> String {
    let sentence = v.to_string();
    let typed = v
        .tile
        .and_then(|t| sites.tiles.get(usize::from(t))?.as_ref()?.elems);
    match (v.field(), typed) {
        (Field::Colsb, Some((elements, ty))) if v.rule != Rule::ColsbWithoutRows => format!(
            "{sentence}\nnote: {elements} {ty} elements of {} bytes make {} bytes per row",
            ty.size(),
            v.value
        ),
        _ => sentence,
    }
}

// The DSL's own messages, one function each, grouped by stage.

// ---- syntax (ast.rs) ----

const KEYS: &str = "`palette`, `start_row` and the tiles `t0` to `t7`";

pub fn expected_statement(found: &str) -> String {
    format!("expected `palette`, `start_row` or a tile such as `t0`, found {found}")
}

pub fn expected_struct(found: &str) -> String {
    format!(
        "expected `struct Name;` to declare a layout with typed tile handles, as in `pub struct Gemm; palette 1; ...`, found {found}"
    )
}

pub fn expected_layout_name(found: &str) -> String {
    format!("expected the layout's name after `struct`, as in `pub struct Gemm;`, found {found}")
}

pub fn generic_layout(name: &proc_macro2::Ident) -> String {
    format!(
        "a layout type takes no generic parameters: its tiles are fixed by the statements; write `struct {name};`"
    )
}

pub fn expected_semicolon(found: &str) -> String {
    format!("expected `;` between statements, found {found}")
}

pub fn unknown_key(key: &str) -> String {
    match suggest(key) {
        Some(near) => format!("unknown key `{key}`; the keys are {KEYS} (did you mean `{near}`?)"),
        None => format!("unknown key `{key}`; the keys are {KEYS}"),
    }
}

/// A key the user probably meant: a tile key in the wrong case, or a setting one or two edits
/// away.
fn suggest(key: &str) -> Option<String> {
    let lower = key.to_ascii_lowercase();
    if crate::ast::tile_index(&lower).is_some() {
        return Some(lower);
    }
    // `t07`: a tile number with leading zeros.
    if let Some(digits) = lower.strip_prefix('t') {
        let trimmed = digits.trim_start_matches('0');
        let canonical = format!("t{}", if trimmed.is_empty() { "0" } else { trimmed });
        if !digits.is_empty() && crate::ast::tile_index(&canonical).is_some() {
            return Some(canonical);
        }
    }
    ["palette", "start_row"]
        .into_iter()
        .find(|k| edit_distance(&lower, k) <= 2)
        .map(str::to_owned)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

pub fn expected_value(key: &Ident, found: &str) -> String {
    format!("expected a decimal integer after `{key}`, as in `{key} 1`, found {found}")
}

pub fn value_suffix(key: &Ident, literal: &str, digits: &str, suffix: &str) -> String {
    format!(
        "unexpected suffix `{suffix}` on `{literal}`; write the number alone, as in `{key} {digits}`"
    )
}

pub fn expected_name(key: &Ident, found: &str) -> String {
    format!("expected a name for tile {key} after `as`, as in `{key} as a: 16x64`, found {found}")
}

pub fn expected_colon(key: &Ident, name: Option<&Ident>, found: &str) -> String {
    let head = match name {
        Some(name) => format!("{key} as {name}"),
        None => key.to_string(),
    };
    format!("expected `:` after `{head}`, as in `{head}: 16x64`, found {found}")
}

pub fn expected_shape(key: &Ident, found: &str) -> String {
    format!(
        "expected the shape of tile {key} as `rows x cols`, as in `{key}: 16x64`, found {found}"
    )
}

pub fn expected_x(rows: &str, found: &str) -> String {
    format!("expected `x` between the rows and the columns, as in `{rows}x64` or `{rows} x 64`, found {found}")
}

pub fn expected_columns(found: &str) -> String {
    format!("expected the columns after `x`, a decimal integer as in `16 x 64`, found {found}")
}

/// A shape literal with a suffix that is not `x` and the columns: `16x64u8`, `16y64`, `16u8`.
pub fn shape_suffix(literal: &str, digits: &str, suffix: &str) -> String {
    if let Some(cols) = suffix.strip_prefix('x') {
        let end = cols
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(cols.len());
        let (cols, ty) = cols.split_at(end);
        if end > 0 && ElemType::from_name(ty).is_some() {
            return format!(
                "`{literal}` is one token to rustc, the number {digits} with the suffix `{suffix}`; put a space before the element type: `{digits}x{cols} {ty}`"
            );
        }
    }
    format!(
        "`{literal}` is not a shape: rustc reads it as the number {digits} with the suffix `{suffix}`; write `rows x cols` with decimal numbers, as in `16x64`"
    )
}

/// Columns written with the element type glued on: `16 x 64i32`, `16 x64i32`.
pub fn glued_type(written: &str, columns: &str, ty: &str) -> String {
    format!(
        "`{written}` is one token to rustc; put a space before the element type: `{columns} {ty}`"
    )
}

pub fn unknown_elem(name: &str) -> String {
    let all: Vec<String> = ElemType::ALL.iter().map(|t| format!("`{t}`")).collect();
    format!(
        "unknown element type `{name}`; the element types are {}",
        all.join(", ")
    )
}

/// A hexadecimal, octal or binary literal.
pub fn not_decimal(literal: &str, radix: &str, value: &str, rows_of_shape: bool) -> String {
    let glued = literal.len() > 2 && literal[2..].bytes().all(|b| b.is_ascii_digit());
    if rows_of_shape && radix == "hexadecimal" && glued {
        format!(
            "`{literal}` is a hexadecimal literal to rustc (the number {value}), not 0 rows by {} bytes; write the shape as `rows x cols` with decimal numbers, as in `16x64`",
            &literal[2..]
        )
    } else {
        let article = if radix.starts_with('o') { "an" } else { "a" };
        format!("`{literal}` is {article} {radix} literal (the number {value}); the numbers of `tilecfg!` are decimal")
    }
}

pub fn negative(literal: &str) -> String {
    format!("`{literal}` is negative; the numbers of `tilecfg!` are unsigned decimal integers")
}

// ---- meaning (lower.rs) ----

pub fn missing_palette() -> &'static str {
    "missing `palette`: a tile configuration starts with `palette 1;` (or is `palette 0` for the INIT configuration)"
}

pub fn palette_not_first(palette: &str) -> String {
    format!("`{palette}` must come first, before every tile and `start_row`")
}

pub fn duplicate(what: &str) -> String {
    format!("{what} is given twice")
}

pub fn first_given(what: &str) -> String {
    format!("{what} is first given here")
}

pub fn duplicate_name(name: &Ident, first: &Ident) -> String {
    format!("tile name `{name}` is given twice; it already names tile {first}")
}

pub fn first_name(name: &Ident, tile: &Ident) -> String {
    format!("tile name `{name}` first names tile {tile} here")
}

pub fn reserved_name(name: &str, key: &Ident, layout: &Ident) -> String {
    format!(
        "tile {key} cannot be named `{name}`: the layout already has an item of that name (`{layout}::{name}`); choose another name"
    )
}

pub fn keyword_name(name: &str, key: &Ident) -> String {
    format!(
        "tile {key} cannot be named `{name}`, a keyword since Rust 2024; write `r#{name}` or choose another name"
    )
}

pub fn start_row_in_layout(setting: &str) -> String {
    format!(
        "`{setting}` in a layout: its typed tiles load and store whole tiles, but with start_row the first instruction skips the rows before it; remove it (start_row is for resuming an interrupted load or store, through the expression form and the untyped API)"
    )
}

pub fn statement_attribute() -> &'static str {
    "only doc comments can come before a statement of `tilecfg!`"
}

pub fn name_outside_layout(name: &Ident, key: &Ident) -> String {
    format!(
        "tile {key} is named `{name}`, but only the item form declares typed handles for named tiles; start with `struct Name;` to declare a layout, or remove `as {name}`"
    )
}

pub fn register_name(name: &Ident, key: &Ident) -> String {
    format!("tile {key} cannot be named `{name}`, the name of a tile register; choose another name")
}

pub fn init_with_tile(tile: &str) -> String {
    format!(
        "palette 0 is the INIT configuration: LDTILECFG ignores every byte after the palette id, so it configures no tile; remove `{tile}` or write `palette 1`"
    )
}

pub fn init_with_start_row(setting: &str) -> String {
    format!(
        "palette 0 is the INIT configuration: LDTILECFG ignores start_row; remove `{setting}` or write `palette 1`"
    )
}

pub fn unused_shape(key: &Ident, shape: &str) -> String {
    format!(
        "tile {key} is `{shape}`, the shape of an unused tile; leave {key} out to keep it unused"
    )
}

pub fn palette_overflow(palette: &str) -> String {
    format!(
        "palette {palette} is too large for the palette_id field{}",
        width(8)
    )
}

pub fn start_row_overflow(start_row: &str) -> String {
    format!(
        "start_row {start_row} is too large for the start_row field{}",
        width(8)
    )
}

pub fn rows_overflow(key: &Ident, rows: &str) -> String {
    format!(
        "tile {key} has {rows} rows, too many for its rows field{}",
        width(8)
    )
}

/// `bytes` is the product of `cols` and the element size when an element type is given.
pub fn colsb_overflow(key: &Ident, cols: &str, elem: Option<ElemType>, bytes: &str) -> String {
    match elem {
        Some(ty) => format!(
            "tile {key} has {cols} {ty} elements per row, {bytes} bytes, too many for its colsb field{}",
            width(16)
        ),
        None => format!("tile {key} has {cols} bytes per row, too many for its colsb field{}", width(16)),
    }
}

/// How wide a field of the image is.
fn width(bits: u32) -> String {
    let max = (1u32 << bits) - 1;
    format!(": it is {bits} bits wide in the LDTILECFG image (at most {max})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule violations `tilecfg!` reports for `input` (which must parse and lower cleanly
    /// but for numbers too wide for their fields).
    fn violation_messages(input: &str) -> Vec<String> {
        let config = crate::ast::parse(input.parse().expect("tokens"));
        assert!(config.errors.is_empty(), "a syntax error in {input}");
        let lowered = crate::lower::lower(&config);
        let report = amx_tilecfg::validate(&lowered.image.expect("an image"), &crate::lower::TABLE);
        violations(&report, &lowered.sites)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn errors_combine_into_one_that_keeps_each() {
        assert!(combine(Vec::new()).is_none());
        let one = syn::Error::new(Span::call_site(), "first");
        let two = syn::Error::new(Span::call_site(), "second");
        let all = combine([one, two]).expect("two errors");
        let messages: Vec<String> = all.into_iter().map(|e| e.to_string()).collect();
        assert_eq!(messages, ["first", "second"]);
    }

    #[test]
    fn a_violation_keeps_the_rules_sentence_and_explains_typed_columns() {
        let found = violation_messages("palette 1; t0: 17x64; t1: 16x17 i32");
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("17 rows"), "{found:?}");
        assert!(
            found[1].ends_with("\nnote: 17 i32 elements of 4 bytes make 68 bytes per row"),
            "{found:?}"
        );
        // Bytes written as bytes need no note.
        let found = violation_messages("palette 1; t0: 16x68");
        assert_eq!(found.len(), 1);
        assert!(!found[0].contains("note:"), "{found:?}");
    }

    #[test]
    fn a_number_too_wide_for_its_field_is_not_reported_again_as_a_violation() {
        // 256 rows are clamped to 255 in the image, which breaks max_rows; the overflow error
        // (from lower) is the one the user sees.
        assert!(violation_messages("palette 1; t0: 256x64").is_empty());
        // start_row's limit is the rows: an overflowed rows field silences that rule too.
        assert!(violation_messages("palette 1; start_row 20; t0: 300x64").is_empty());
        // Without an overflow the same rules are reported.
        assert_eq!(
            violation_messages("palette 1; start_row 20; t0: 16x64").len(),
            1
        );
    }

    #[test]
    fn suggestions_for_unknown_keys() {
        assert_eq!(suggest("T3").as_deref(), Some("t3"));
        assert_eq!(suggest("t07").as_deref(), Some("t7"));
        assert_eq!(suggest("t00").as_deref(), Some("t0"));
        assert_eq!(suggest("pallete").as_deref(), Some("palette"));
        assert_eq!(suggest("startrow").as_deref(), Some("start_row"));
        assert_eq!(suggest("tile"), None);
        assert_eq!(suggest("rows"), None);
        assert_eq!(edit_distance("palette", "palette"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn literal_messages_name_what_rustc_saw() {
        assert_eq!(
            not_decimal("0x64", "hexadecimal", "100", true),
            "`0x64` is a hexadecimal literal to rustc (the number 100), not 0 rows by 64 bytes; write the shape as `rows x cols` with decimal numbers, as in `16x64`"
        );
        assert_eq!(
            not_decimal("0o17", "octal", "15", false),
            "`0o17` is an octal literal (the number 15); the numbers of `tilecfg!` are decimal"
        );
        assert!(shape_suffix("16x64u8", "16", "x64u8").ends_with("`16x64 u8`"));
        assert!(shape_suffix("16u8", "16", "u8").starts_with("`16u8` is not a shape"));
        assert!(palette_overflow("256").ends_with("(at most 255)"));
        assert!(
            colsb_overflow(&Ident::new("t1", Span::call_site()), "70000", None, "70000")
                .ends_with("(at most 65535)")
        );
    }
}
