//! The `tilecfg!` macro: an Intel AMX tile configuration, checked at compile time.
//!
//! Use it through `amx-runtime` (`amx_runtime::tilecfg`), which provides the type it expands to;
//! the runnable examples are in that crate's documentation.
//!
//! # Grammar
//!
//! ```text
//! tilecfg!  := `tilecfg!` ( `{` config `}` | `(` config `)` | `[` config `]` )
//! config    := layout? stmt ( `;` stmt )* `;`?  palette first; start_row and tiles in any order
//! layout    := attr* vis `struct` IDENT `;`      the item form: a layout type with typed handles
//! stmt      := doc* ( `palette` INT             required, first; 0 is INIT (nothing else allowed)
//!            | `start_row` INT                  optional, default 0 (not in a layout)
//!            | tile )                           a tile's doc comments document its handle
//! tile      := `t`DIGITS ( `as` IDENT )? `:` shape
//! shape     := INT `x` INT elem?                `16x64`, `16 x 64`, `16x 64`, `16 x64`
//! elem      := `i8` | `u8` | `bf16` | `f16` | `i32` | `f32`
//! INT       := a decimal integer literal without suffix
//! ```
//!
//! `rows x cols` gives the rows and the bytes per row (colsb) of the tile; with an element type,
//! the columns count elements and colsb is `cols * size` (`16x16 i32` is 16 rows of 64 bytes).
//! Tiles that are not listed are unused. For example:
//!
//! ```text
//! tilecfg! {
//!     palette 1;
//!     t0 as c: 16x16 i32;
//!     t4 as a: 16x64;
//!     t6: 16 x 64;
//! }
//! ```
//!
//! The expansion is a constant expression of type `::amx_runtime::TileConfig` holding the exact
//! 64-byte LDTILECFG image, so it can initialise a `static` or a `const`.
//!
//! # Checks
//!
//! The macro implements no rule of its own. It parses, lowers the statements to the 64-byte
//! image, and runs `amx_tilecfg::validate` against the architectural palette table (palette 1:
//! 8 tiles of at most 16 rows x 64 bytes). Every violation, load-time (#GP on LDTILECFG) and
//! use-time (#UD on TILELOADD, TILESTORED, TDP*), becomes an error on the token that produced the
//! field, with the rules crate's sentence. The mistakes only the DSL can make (syntax, a key or
//! tile given twice, a tile past `t7`, numbers too wide for their field, non-decimal literals,
//! tiles under palette 0) have their own messages. All errors of an input are reported at once.
//!
//! # Stages
//!
//! One file per stage, wired together in [`tilecfg`]: `ast` (tokens to statements, keeping
//! spans), `lower` (statements to the image, and each field's token), `diag` (every message, and
//! violations put on their tokens), `expand` (the image to tokens).

mod ast;
mod diag;
mod expand;
mod layout;
mod lower;

use proc_macro::TokenStream;

/// Checks an AMX tile configuration at compile time and expands to its 64-byte LDTILECFG image,
/// a constant `::amx_runtime::TileConfig`.
///
/// ```text
/// static GEMM: TileConfig = tilecfg! { palette 1; t0: 16x16 i32; t4: 16x64; t6: 16x64 };
/// ```
///
/// See the crate documentation for the grammar and the checks.
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
