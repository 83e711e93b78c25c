//! Syntax: the tokens inside `tilecfg! { ... }` to a [`Config`] that keeps every span.
//!
//! The parser never stops at the first mistake: a statement that does not parse is recorded as
//! [`Stmt::Invalid`], its error is kept, and parsing resumes after the next `;`. Only syntax is
//! checked here (the shape of each statement, literals, element type names); what the statements
//! mean together is `lower`'s job.
//!
//! rustc's lexer shapes this grammar: `16x64` is one token (the integer `16` with the suffix
//! `x64`), `16x 64` is the integer `16` with suffix `x` then `64`, `16 x64` is `16` then the
//! identifier `x64`, and `0x64` is the hexadecimal integer 100.

use amx_tilecfg::ElemType;
use proc_macro2::{Span, TokenStream, TokenTree};
use syn::ext::IdentExt;
use syn::parse::{ParseStream, Parser};
use syn::{Ident, LitInt, Token};

use crate::diag::{self, Site};

/// A parsed `tilecfg!` input.
pub struct Config {
    /// `struct Name;` before the statements: the item form, which declares a layout type with
    /// typed tile handles.
    pub header: Option<Header>,
    /// Whether the input starts as the item form (`#[..]`, `pub` or `struct`), even if its
    /// header then failed to parse: the expansion must then be items, not an expression.
    pub item_form: bool,
    /// The statements in source order, including the ones that failed to parse.
    pub stmts: Vec<Stmt>,
    /// The syntax errors, in source order.
    pub errors: Vec<syn::Error>,
}

/// `#[attrs] vis struct Name;`: the layout type the item form declares.
pub struct Header {
    /// Attributes and doc comments, passed on to the struct.
    pub attrs: Vec<syn::Attribute>,
    /// The struct's visibility, also given to its handles and `configure`.
    pub vis: syn::Visibility,
    /// The struct's name.
    pub ident: Ident,
}

/// One `;`-separated statement.
pub enum Stmt {
    /// `palette N`
    Palette(Setting),
    /// `start_row N`
    StartRow(Setting),
    /// `tN [as name]: shape`
    Tile(Tile),
    /// A statement that did not parse; its error is in [`Config::errors`].
    Invalid,
}

/// `palette N` or `start_row N`.
pub struct Setting {
    /// The key as written (`palette` or `start_row`).
    pub key: Ident,
    /// The value.
    pub value: Number,
}

impl Setting {
    /// The whole statement, key to value.
    pub fn site(&self) -> Site {
        Site::range(self.key.span(), self.value.span)
    }

    /// The statement as the user wrote it, for messages: `start_row 3`.
    pub fn text(&self) -> String {
        format!("{} {}", self.key, self.value.text)
    }
}

/// A decimal integer as written, with its value.
pub struct Number {
    /// The value, saturated at `u128::MAX` for longer numbers (every check happens far below).
    pub value: u128,
    /// The decimal digits as the user wrote them (without `_`), for messages.
    pub text: String,
    /// The token the number is part of (`16x64` is one token for both numbers).
    pub span: Span,
}

impl Number {
    /// `digits` may hold `_` separators (the columns glued to the rows, `16x6_4`, come from a
    /// suffix, which rustc does not normalise).
    fn new(digits: &str, span: Span) -> Number {
        let text: String = digits.chars().filter(|&c| c != '_').collect();
        Number {
            value: text.parse().unwrap_or(u128::MAX),
            text,
            span,
        }
    }
}

/// `tN [as name]: shape`.
pub struct Tile {
    /// Doc comments written before the statement (they document the tile's handle).
    pub docs: Vec<syn::Attribute>,
    /// The tile key as written (`t0`).
    pub key: Ident,
    /// The tile number from the key (`t12` gives 12; `lower` rejects the ones past the image).
    pub index: u64,
    /// The name after `as`, kept for the typed tile handles.
    pub name: Option<Ident>,
    /// The shape after `:`.
    pub shape: Shape,
}

impl Tile {
    /// The whole statement, key to shape.
    pub fn site(&self) -> Site {
        Site::range(self.key.span(), self.shape.site().end)
    }
}

/// `rows x cols [type]`.
pub struct Shape {
    /// Number of rows.
    pub rows: Number,
    /// Bytes per row, or elements per row when `elem` is given.
    pub cols: Number,
    /// The element type the columns count, if written.
    pub elem: Option<Elem>,
}

impl Shape {
    /// The whole shape, rows to element type.
    pub fn site(&self) -> Site {
        Site::range(self.rows.span, self.columns_site().end)
    }

    /// The tokens that give the bytes per row: the columns, and the element type if any.
    pub fn columns_site(&self) -> Site {
        match &self.elem {
            Some(elem) => Site::range(self.cols.span, elem.ident.span()),
            None => Site::from(self.cols.span),
        }
    }

    /// The shape as written, normalised for messages: `16x64` or `16x16 i32`.
    pub fn text(&self) -> String {
        match &self.elem {
            Some(elem) => format!("{}x{} {}", self.rows.text, self.cols.text, elem.ty),
            None => format!("{}x{}", self.rows.text, self.cols.text),
        }
    }
}

/// An element type after the columns.
pub struct Elem {
    /// The type.
    pub ty: ElemType,
    /// Where it was written.
    pub ident: Ident,
}

/// Parses the macro input, collecting every syntax error.
pub fn parse(tokens: TokenStream) -> Config {
    let parser = |input: ParseStream| Ok(parse_config(input));
    // `parse_config` consumes every token and reports its errors in the `Config`, so the parser
    // itself cannot fail; the fallback only keeps that true if it ever changes.
    parser.parse2(tokens).unwrap_or_else(|error| Config {
        header: None,
        item_form: false,
        stmts: vec![Stmt::Invalid],
        errors: vec![error],
    })
}

fn parse_config(input: ParseStream) -> Config {
    let mut config = Config {
        header: None,
        item_form: false,
        stmts: Vec::new(),
        errors: Vec::new(),
    };
    if starts_item_form(input) {
        config.item_form = true;
        match parse_header(input) {
            Ok(header) => config.header = Some(header),
            Err(error) => {
                config.errors.push(error);
                skip_statement(input);
            }
        }
        if input.peek(Token![;]) {
            let _: Token![;] = input.parse().expect("peeked");
        }
    }
    while !input.is_empty() {
        match parse_stmt(input) {
            Ok(stmt) if input.is_empty() || input.peek(Token![;]) => config.stmts.push(stmt),
            Ok(_) => {
                config.errors.push(syn::Error::new(
                    input.span(),
                    diag::expected_semicolon(&found(input)),
                ));
                config.stmts.push(Stmt::Invalid);
                skip_statement(input);
            }
            Err(error) => {
                config.errors.push(error);
                config.stmts.push(Stmt::Invalid);
                skip_statement(input);
            }
        }
        if input.peek(Token![;]) {
            let _: Token![;] = input.parse().expect("peeked");
        }
    }
    config
}

/// Whether the input starts with a layout header: `pub` or `struct`, possibly after attributes
/// (doc comments before a statement such as `palette 1` belong to that statement instead).
fn starts_item_form(input: ParseStream) -> bool {
    let fork = input.fork();
    let attrs_parse = fork.call(syn::Attribute::parse_outer).is_ok();
    let header = fork.peek(Token![pub]) || fork.peek(Token![struct]);
    header || (input.peek(Token![#]) && !attrs_parse)
}

/// `#[attrs] vis struct Name`, up to (not including) its `;`.
fn parse_header(input: ParseStream) -> syn::Result<Header> {
    let attrs = input.call(syn::Attribute::parse_outer)?;
    let vis: syn::Visibility = input.parse()?;
    let _: Token![struct] = input
        .parse()
        .map_err(|_| syn::Error::new(input.span(), diag::expected_struct(&found(input))))?;
    let ident: Ident = input
        .parse()
        .map_err(|_| syn::Error::new(input.span(), diag::expected_layout_name(&found(input))))?;
    if input.peek(Token![<]) {
        return Err(syn::Error::new(input.span(), diag::generic_layout(&ident)));
    }
    if !input.peek(Token![;]) {
        return Err(syn::Error::new(
            input.span(),
            diag::expected_semicolon(&found(input)),
        ));
    }
    Ok(Header { attrs, vis, ident })
}

/// Skips to the next top-level `;` (delimited groups are single tokens, so a `;` inside one is
/// never taken for a separator).
fn skip_statement(input: ParseStream) {
    while !input.is_empty() && !input.peek(Token![;]) {
        let _: TokenTree = input.parse().expect("not at the end");
    }
}

fn parse_stmt(input: ParseStream) -> syn::Result<Stmt> {
    let docs = parse_docs(input)?;
    if !input.peek(Ident::peek_any) {
        return Err(syn::Error::new(
            input.span(),
            diag::expected_statement(&found(input)),
        ));
    }
    let key = input.call(Ident::parse_any)?;
    let text = key.to_string();
    match text.as_str() {
        "palette" => Ok(Stmt::Palette(Setting {
            value: parse_value(input, &key)?,
            key,
        })),
        "start_row" => Ok(Stmt::StartRow(Setting {
            value: parse_value(input, &key)?,
            key,
        })),
        _ => match tile_index(&text) {
            Some(index) => parse_tile(input, key, index, docs).map(Stmt::Tile),
            None => Err(syn::Error::new(key.span(), diag::unknown_key(&text))),
        },
    }
}

/// Doc comments before a statement: kept for a tile's handle, accepted (as comments) before
/// the other statements. Any other attribute is an error: nothing here could carry it.
fn parse_docs(input: ParseStream) -> syn::Result<Vec<syn::Attribute>> {
    let attrs = input.call(syn::Attribute::parse_outer)?;
    match attrs.iter().find(|a| !a.path().is_ident("doc")) {
        Some(other) => Err(syn::Error::new_spanned(other, diag::statement_attribute())),
        None => Ok(attrs),
    }
}

/// The tile number of a key `t0`, `t1`, ... (`t8` and up too; `lower` rejects those).
pub fn tile_index(key: &str) -> Option<u64> {
    let digits = key.strip_prefix('t')?;
    let canonical = digits == "0" || !digits.starts_with('0');
    if digits.is_empty() || !canonical || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Whether an identifier starts a statement (so it cannot be an element type).
fn is_key(ident: &str) -> bool {
    ident == "palette" || ident == "start_row" || tile_index(ident).is_some()
}

/// The value of `palette N` or `start_row N`: a decimal integer without suffix.
fn parse_value(input: ParseStream, key: &Ident) -> syn::Result<Number> {
    if !input.peek(LitInt) {
        return Err(syn::Error::new(
            next_span(input, key.span()),
            diag::expected_value(key, &found(input)),
        ));
    }
    let (lit, site) = parse_int(input)?;
    check_decimal(&lit, site, false)?;
    if !lit.suffix().is_empty() {
        return Err(syn::Error::new(
            lit.span(),
            diag::value_suffix(key, &lit.to_string(), lit.base10_digits(), lit.suffix()),
        ));
    }
    Ok(Number::new(lit.base10_digits(), lit.span()))
}

fn parse_tile(
    input: ParseStream,
    key: Ident,
    index: u64,
    docs: Vec<syn::Attribute>,
) -> syn::Result<Tile> {
    let mut last = key.span();
    let name = if input.peek(Token![as]) {
        let as_token: Token![as] = input.parse()?;
        if !input.peek(Ident) {
            return Err(syn::Error::new(
                next_span(input, as_token.span),
                diag::expected_name(&key, &found(input)),
            ));
        }
        let name: Ident = input.parse()?;
        last = name.span();
        Some(name)
    } else {
        None
    };
    if !input.peek(Token![:]) {
        return Err(syn::Error::new(
            next_span(input, last),
            diag::expected_colon(&key, name.as_ref(), &found(input)),
        ));
    }
    let colon: Token![:] = input.parse()?;
    let shape = parse_shape(input, &key, colon.span)?;
    Ok(Tile {
        docs,
        key,
        index,
        name,
        shape,
    })
}

/// `rows x cols [type]`, in each way rustc can tokenize it.
fn parse_shape(input: ParseStream, key: &Ident, colon: Span) -> syn::Result<Shape> {
    if !input.peek(LitInt) {
        return Err(syn::Error::new(
            next_span(input, colon),
            diag::expected_shape(key, &found(input)),
        ));
    }
    let (lit, site) = parse_int(input)?;
    check_decimal(&lit, site, true)?;
    let rows = Number::new(lit.base10_digits(), lit.span());
    let cols = match lit.suffix() {
        // `16 x 64` or `16 x64`
        "" => parse_separate_columns(input, &lit)?,
        // `16x 64`
        "x" => parse_columns_literal(input, lit.span())?,
        // `16x64`, or a suffix that is not a shape
        suffix => match split_columns(suffix) {
            Some((digits, "")) => Number::new(digits, lit.span()),
            _ => {
                return Err(syn::Error::new(
                    lit.span(),
                    diag::shape_suffix(&lit.to_string(), lit.base10_digits(), suffix),
                ))
            }
        },
    };
    let elem = parse_elem(input)?;
    Ok(Shape { rows, cols, elem })
}

/// After rows written alone: `x 64` or `x64`.
fn parse_separate_columns(input: ParseStream, rows: &LitInt) -> syn::Result<Number> {
    let fork = input.fork();
    let x = match fork.call(Ident::parse_any) {
        Ok(x) => x,
        Err(_) => {
            return Err(syn::Error::new(
                next_span(input, rows.span()),
                diag::expected_x(&rows.to_string(), &found(input)),
            ))
        }
    };
    let text = x.to_string();
    if text == "x" {
        input.call(Ident::parse_any)?;
        return parse_columns_literal(input, x.span());
    }
    match split_columns(&text) {
        Some((digits, "")) => {
            input.call(Ident::parse_any)?;
            Ok(Number::new(digits, x.span()))
        }
        Some((digits, rest)) if ElemType::from_name(rest).is_some() => Err(syn::Error::new(
            x.span(),
            diag::glued_type(&text, &format!("x{digits}"), rest),
        )),
        _ => Err(syn::Error::new(
            x.span(),
            diag::expected_x(&rows.to_string(), &format!("`{text}`")),
        )),
    }
}

/// The columns after a separate `x`: a decimal integer literal.
fn parse_columns_literal(input: ParseStream, x: Span) -> syn::Result<Number> {
    if !input.peek(LitInt) {
        return Err(syn::Error::new(
            next_span(input, x),
            diag::expected_columns(&found(input)),
        ));
    }
    let (lit, site) = parse_int(input)?;
    check_decimal(&lit, site, false)?;
    match lit.suffix() {
        "" => Ok(Number::new(lit.base10_digits(), lit.span())),
        suffix if ElemType::from_name(suffix).is_some() => Err(syn::Error::new(
            lit.span(),
            diag::glued_type(&lit.to_string(), lit.base10_digits(), suffix),
        )),
        suffix => Err(syn::Error::new(
            lit.span(),
            diag::shape_suffix(&lit.to_string(), lit.base10_digits(), suffix),
        )),
    }
}

/// Splits a suffix `x64`, `x6_4` or `x64u8` into the column digits (with any `_` separators, as
/// a literal may have them) and what follows them.
fn split_columns(suffix: &str) -> Option<(&str, &str)> {
    let rest = suffix.strip_prefix('x')?;
    if !rest.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let end = rest
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(rest.len());
    Some(rest.split_at(end))
}

/// An optional element type after the columns (an identifier that does not start the next
/// statement, so that a forgotten `;` is reported as such).
fn parse_elem(input: ParseStream) -> syn::Result<Option<Elem>> {
    let fork = input.fork();
    let Ok(ident) = fork.call(Ident::parse_any) else {
        return Ok(None);
    };
    let text = ident.to_string();
    if is_key(&text) {
        return Ok(None);
    }
    input.call(Ident::parse_any)?;
    match ElemType::from_name(&text) {
        Some(ty) => Ok(Some(Elem { ty, ident })),
        None => Err(syn::Error::new(ident.span(), diag::unknown_elem(&text))),
    }
}

/// Reads an integer literal; syn reads `-16` as one literal whose span is the `-` alone, so the
/// site of the whole number is returned beside it.
fn parse_int(input: ParseStream) -> syn::Result<(LitInt, Site)> {
    let start = input.span();
    let fork = input.fork();
    let _: Option<Token![-]> = fork.parse()?;
    let end = fork.span();
    Ok((input.parse()?, Site::range(start, end)))
}

/// Rejects negative numbers (syn reads `-1` as one literal) and hexadecimal, octal and binary
/// literals: the DSL's numbers are unsigned decimal integers.
fn check_decimal(lit: &LitInt, site: Site, rows_of_shape: bool) -> syn::Result<()> {
    let text = lit.to_string();
    if lit.base10_digits().starts_with('-') {
        return Err(site.error(diag::negative(&text)));
    }
    let radix = match text.get(..2) {
        Some("0x") => "hexadecimal",
        Some("0o") => "octal",
        Some("0b") => "binary",
        _ => return Ok(()),
    };
    Err(syn::Error::new(
        lit.span(),
        diag::not_decimal(&text, radix, lit.base10_digits(), rows_of_shape),
    ))
}

/// The next token, quoted for a message, or "the end of the input".
fn found(input: ParseStream) -> String {
    if input.is_empty() {
        return "the end of the input".to_owned();
    }
    match input.fork().parse::<TokenTree>() {
        Ok(TokenTree::Group(group)) => {
            let (open, close) = match group.delimiter() {
                proc_macro2::Delimiter::Parenthesis => ("(", ")"),
                proc_macro2::Delimiter::Brace => ("{", "}"),
                proc_macro2::Delimiter::Bracket => ("[", "]"),
                proc_macro2::Delimiter::None => ("", ""),
            };
            format!("`{open}...{close}`")
        }
        Ok(token) => format!("`{token}`"),
        Err(_) => "the end of the input".to_owned(),
    }
}

/// Where to point an error about the next token: the token itself, or `after` (the last token
/// read) when the input has ended.
fn next_span(input: ParseStream, after: Span) -> Span {
    if input.is_empty() {
        after
    } else {
        input.span()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input as rustc would tokenize it (proc-macro2's own lexer outside a macro).
    fn parsed(input: &str) -> Config {
        parse(input.parse().expect("tokens"))
    }

    fn messages(config: &Config) -> Vec<String> {
        config.errors.iter().map(ToString::to_string).collect()
    }

    fn tiles(config: &Config) -> Vec<&Tile> {
        config
            .stmts
            .iter()
            .filter_map(|stmt| match stmt {
                Stmt::Tile(tile) => Some(tile),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn tile_keys_are_t_and_a_canonical_number() {
        assert_eq!(tile_index("t0"), Some(0));
        assert_eq!(tile_index("t7"), Some(7));
        assert_eq!(tile_index("t12"), Some(12));
        for not_a_tile in ["t", "t01", "t00", "T0", "tx", "t1a", "t-1", "palette"] {
            assert_eq!(tile_index(not_a_tile), None, "{not_a_tile}");
        }
    }

    #[test]
    fn glued_columns_split_off_their_digits() {
        assert_eq!(split_columns("x64"), Some(("64", "")));
        assert_eq!(split_columns("x6_4"), Some(("6_4", "")));
        assert_eq!(split_columns("x64u8"), Some(("64", "u8")));
        assert_eq!(split_columns("x"), None);
        assert_eq!(split_columns("xu8"), None);
        assert_eq!(split_columns("y64"), None);
    }

    #[test]
    fn every_tokenization_of_a_shape_parses_to_the_same_numbers() {
        let config =
            parsed("palette 1; t0: 16x64; t1: 16 x 64; t2: 16x 64; t3: 16 x64; t4: 16x6_4");
        assert!(config.errors.is_empty(), "{:?}", messages(&config));
        let tiles = tiles(&config);
        assert_eq!(tiles.len(), 5);
        for (tile, index) in tiles.iter().zip(0..) {
            assert_eq!(tile.index, index);
            assert_eq!((tile.shape.rows.value, tile.shape.cols.value), (16, 64));
            assert_eq!(tile.shape.text(), "16x64");
            assert!(tile.shape.elem.is_none() && tile.name.is_none());
        }
    }

    #[test]
    fn element_types_names_and_the_item_form() {
        let config = parsed(
            "pub struct Gemm; palette 1; /// C\nt0 as c: 16x16 i32; t4 as r#a: 16 x 32 bf16;",
        );
        assert!(config.errors.is_empty(), "{:?}", messages(&config));
        assert!(config.item_form);
        assert_eq!(
            config.header.as_ref().map(|h| h.ident.to_string()),
            Some("Gemm".into())
        );
        let tiles = tiles(&config);
        assert_eq!(
            tiles[0].name.as_ref().map(ToString::to_string),
            Some("c".into())
        );
        assert_eq!(tiles[0].docs.len(), 1);
        assert_eq!(
            tiles[0].shape.elem.as_ref().map(|e| e.ty),
            Some(ElemType::I32)
        );
        assert_eq!(tiles[0].shape.text(), "16x16 i32");
        assert_eq!(
            tiles[1].shape.elem.as_ref().map(|e| e.ty),
            Some(ElemType::Bf16)
        );
        assert!(matches!(config.stmts[0], Stmt::Palette(ref s) if s.text() == "palette 1"));
    }

    #[test]
    fn the_parser_goes_on_after_each_mistake() {
        let config = parsed("palette 1; t0 16x64; t1: 16x64 foo; start_row 0x10; t2: 8x64");
        assert_eq!(config.stmts.len(), 5);
        assert!(matches!(config.stmts[1], Stmt::Invalid));
        assert!(matches!(config.stmts[2], Stmt::Invalid));
        assert!(matches!(config.stmts[3], Stmt::Invalid));
        assert!(matches!(config.stmts[4], Stmt::Tile(ref t) if t.index == 2));
        let messages = messages(&config);
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert!(
            messages[0].starts_with("expected `:` after `t0`"),
            "{}",
            messages[0]
        );
        assert!(
            messages[1].starts_with("unknown element type `foo`"),
            "{}",
            messages[1]
        );
        assert!(
            messages[2].contains("hexadecimal literal (the number 16)"),
            "{}",
            messages[2]
        );
    }

    #[test]
    fn numbers_are_unsigned_decimal_without_suffix() {
        let cases = [
            ("palette -1", "`-1` is negative"),
            ("palette 1u8", "unexpected suffix `u8` on `1u8`"),
            ("palette 1; t0: 0x64", "not 0 rows by 64 bytes"),
            ("palette 1; t0: 0b1x64", "binary literal"),
            (
                "palette 1; t0: 16x64i32",
                "put a space before the element type: `16x64 i32`",
            ),
            (
                "palette 1; t0: 16 x 64i32",
                "put a space before the element type: `64 i32`",
            ),
            ("palette 1; t0: 16y64", "`16y64` is not a shape"),
            (
                "palette 1; t0: 16 by 64",
                "expected `x` between the rows and the columns",
            ),
            ("palette", "expected a decimal integer after `palette`"),
        ];
        for (input, expected) in cases {
            let messages = messages(&parsed(input));
            assert!(
                messages.iter().any(|m| m.contains(expected)),
                "{input}: {messages:?}"
            );
        }
    }

    #[test]
    fn a_long_number_saturates_instead_of_failing() {
        let config = parsed("palette 1; t0: 1x999999999999999999999999999999999999999999");
        assert!(config.errors.is_empty(), "{:?}", messages(&config));
        assert_eq!(tiles(&config)[0].shape.cols.value, u128::MAX);
    }

    #[test]
    fn only_doc_comments_may_precede_a_statement() {
        let attribute = messages(&parsed("palette 1; #[inline] t0: 16x64"));
        assert_eq!(attribute, [diag::statement_attribute()]);
        let found = messages(&parsed("palette 1; t0 as : 16x64; start_rw 1; T3: 1x4"));
        assert!(
            found[0].starts_with("expected a name for tile t0"),
            "{found:?}"
        );
        assert!(
            found[1].ends_with("(did you mean `start_row`?)"),
            "{found:?}"
        );
        assert!(found[2].ends_with("(did you mean `t3`?)"), "{found:?}");
    }

    #[test]
    fn a_forgotten_semicolon_is_named() {
        let config = parsed("palette 1 t0: 16x64");
        assert_eq!(
            messages(&config),
            ["expected `;` between statements, found `t0`"]
        );
        // The element type slot does not swallow the next statement's key.
        let config = parsed("palette 1; t0: 16x64 t1: 16x64");
        assert_eq!(
            messages(&config),
            ["expected `;` between statements, found `t1`"]
        );
    }
}
