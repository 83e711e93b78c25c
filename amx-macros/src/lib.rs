//! The `tilecfg!` macro: an Intel AMX tile configuration, checked at compile time.
//!
//! Use it through [`amx-runtime`](https://docs.rs/amx-runtime), which re-exports it as
//! `amx_runtime::tilecfg` and provides the types it expands to; depend on `amx-runtime` only.
//! The grammar, the item form and examples are on the [`tilecfg!`](tilecfg) page.
//!
//! # Checks
//!
//! The macro implements no rule of its own. It parses, lowers the statements to the 64-byte
//! image, and runs `amx_tilecfg::validate` against the architectural palette table (palette 1:
//! 8 tiles of at most 16 rows x 64 bytes). Every violation, load-time (#GP on LDTILECFG) and
//! use-time (#UD on TILELOADD, TILESTORED, TDP*), becomes an error on the token that produced the
//! field, with the rules crate's sentence. The mistakes only the DSL can make (syntax, a key or
//! tile given twice, a tile past `t7`, numbers too wide for their field, non-decimal literals,
//! tiles under palette 0, tile names outside the item form) have their own messages. All errors
//! of an input are reported at once.
//!
//! # Stages
//!
//! One file per stage, wired together in [`tilecfg`]: `ast` (tokens to statements, keeping
//! spans), `lower` (statements to the image, and each field's token), `diag` (every message, and
//! violations put on their tokens), `expand` (the image to tokens), `layout` (the item form).

/// The crate's README, whose examples run as doctests (against `amx-runtime`, a
/// dev-dependency).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod ast;
mod diag;
mod expand;
mod layout;
mod lower;

use proc_macro::TokenStream;

/// Checks an AMX tile configuration at compile time and expands to its 64-byte LDTILECFG image,
/// a constant [`TileConfig`]; in its item form it also declares typed tile handles, so that a
/// dot product whose operands do not fit does not compile.
///
/// ```
/// use amx_runtime::{tilecfg, TileConfig};
///
/// // rows x bytes per row, or rows x elements of a type (16x16 i32 = 16 rows of 64 bytes)
/// static GEMM: TileConfig = tilecfg! {
///     palette 1;
///     t0: 16x16 i32;
///     t4: 16 x 64 i8;
///     t6: 16x64;
/// };
/// assert_eq!(GEMM.as_bytes()[48], 16); // t0's rows
/// assert_eq!(GEMM.tile(0).unwrap().colsb, 64);
/// ```
///
/// # Grammar
///
/// ```text
/// tilecfg!  := `tilecfg!` ( `{` config `}` | `(` config `)` | `[` config `]` )
/// config    := layout? stmt ( `;` stmt )* `;`?  palette first; start_row and tiles in any order
/// layout    := attr* vis `struct` IDENT `;`      the item form: a layout type with typed handles
/// stmt      := doc* ( `palette` INT             required, first; 0 is INIT (nothing else allowed)
///            | `start_row` INT                  optional, default 0 (not in a layout)
///            | tile )                           a tile's doc comments document its handle
/// tile      := `t`DIGITS ( `as` IDENT )? `:` shape    `as IDENT` only in the item form
/// shape     := INT `x` INT elem?                `16x64`, `16 x 64`, `16x 64`, `16 x64`
/// elem      := `i8` | `u8` | `bf16` | `f16` | `i32` | `f32`
/// INT       := a decimal integer literal without suffix
/// ```
///
/// `rows x cols` gives the rows and the bytes per row (colsb) of the tile; with an element type,
/// the columns count elements and colsb is `cols * size` (`16x16 i32` is 16 rows of 64 bytes).
/// Tiles that are not listed are unused. `0x64` is a hexadecimal literal to rustc (the number
/// 100), not "0 rows by 64", and gets its own message. A mistake is a compile error on the
/// token that caused it, naming the rule:
///
/// ```compile_fail
/// use amx_runtime::{tilecfg, TileConfig};
///
/// // error: tile t3 has 17 rows; palette 1 allows at most 16 (max_rows)
/// static BAD: TileConfig = tilecfg! { palette 1; t3: 17x64 };
/// ```
///
/// # The item form: typed tiles
///
/// A leading `struct Name;` (with any visibility and attributes) declares a layout type: its
/// `CONFIG`, a `configure()` that returns the typed tiles, and one associated constant per
/// named tile (`t4 as a: ..` names tile t4 `a`). Only the item form names tiles; a name in
/// the expression form is an error, since nothing there could use it.
///
/// ```
/// use amx_runtime::tilecfg;
///
/// tilecfg! {
///     /// C (16x16 i32) += A (16x64 i8) x B (16x64 i8, the VNNI layout of a 64 x 16 B).
///     pub struct Int8Block;
///     palette 1;
///     t0 as c: 16x16 i32;
///     t4 as a: 16x64 i8;
///     t6 as b: 16x64 i8;
/// }
///
/// let (a, b) = ([1i8; 16 * 64], [2i8; 16 * 64]);
/// let mut c = [0i32; 16 * 16];
/// let mut tiles = Int8Block::configure().unwrap();
/// tiles.zero(Int8Block::c);
/// tiles.load(Int8Block::a, &a, 64).unwrap(); // strides in elements of the slice
/// tiles.load(Int8Block::b, &b, 64).unwrap();
/// tiles.tdpbssd(Int8Block::c, Int8Block::a, Int8Block::b); // operands proven to fit
/// tiles.store(Int8Block::c, &mut c, 16).unwrap();
/// assert!(c.iter().all(|&x| x == 64 * 2));
/// ```
///
/// A handle's type is `Tile<name, register, rows, bytes per row, element>`, and a dot product
/// compiles only for operand triples the instruction accepts (three different tiles, C.rows ==
/// A.rows, B.rows == A.colsb / 4, C.colsb == B.colsb, element types that fit):
///
/// ```compile_fail
/// use amx_runtime::tilecfg;
///
/// tilecfg! {
///     struct Bad;
///     palette 1;
///     t0 as c: 16x16 i32;
///     t4 as a: 8x64 i8; // 8 rows: C.rows != A.rows
///     t6 as b: 16x64 i8;
/// }
/// let mut tiles = Bad::configure().unwrap();
/// // error: TDPBSSD cannot accumulate `Tile<a, 4, 8, 64, i8>` x `Tile<b, 6, 16, 64, i8>` ...
/// tiles.tdpbssd(Bad::c, Bad::a, Bad::b);
/// ```
///
/// The layout's `#[cfg]`s apply to everything declared for it: the type, and beside it a module
/// named after it in snake case (`int8_block_tiles`) holding the tile names. A name cannot be
/// `CONFIG` or `configure`, a register's name, or a plain `gen` (write `r#gen`); `start_row`
/// is refused in a layout (typed loads and stores move whole tiles).
///
/// [`TileConfig`]: https://docs.rs/amx-runtime/latest/amx_runtime/struct.TileConfig.html
#[proc_macro]
pub fn tilecfg(input: TokenStream) -> TokenStream {
    let config = ast::parse(input.into());
    let lowered = lower::lower(&config);
    let report = lowered
        .image
        .map(|image| amx_tilecfg::validate(&image, &lower::TABLE));

    let violations = report.map_or_else(Vec::new, |r| diag::violations(&r, &lowered.sites));
    let errors = config
        .errors
        .iter()
        .cloned()
        .chain(lowered.errors)
        .chain(violations);
    // Without an image there is always an error already (a missing or overflowing palette, or
    // the syntax error that hid it); the fallback error only keeps that true if it ever changes.
    let result = match (diag::combine(errors), lowered.image) {
        (None, Some(image)) => Ok(image),
        (Some(errors), _) => Err(errors),
        (None, None) => Err(syn::Error::new(
            proc_macro2::Span::call_site(),
            diag::missing_palette(),
        )),
    };
    match (&config.header, result) {
        (None, Ok(image)) => expand::config(&image),
        // An item form whose header did not parse: only the errors, which are valid items.
        (None, Err(errors)) if config.item_form => errors.to_compile_error(),
        (None, Err(errors)) => expand::fallback(&errors),
        (Some(header), Ok(image)) => {
            layout::items(header, &config, Some(&image), expand::config(&image))
        }
        (Some(header), Err(errors)) => {
            let errors = errors.to_compile_error();
            let items = layout::items(header, &config, None, expand::init());
            quote::quote!(#errors #items)
        }
    }
    .into()
}
