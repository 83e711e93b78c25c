//! The item form: `tilecfg! { pub struct Name; palette 1; t0 as c: 16x16 i32; ... }` declares a
//! layout type whose associated constants are typed handles of the named tiles, and implements
//! `amx_runtime::typed::Dot` for exactly the operand triples the silicon accepts.
//!
//! The operand rule is `amx_tilecfg::check_dot`, the same function the run-time checks call, so
//! a dot product that compiles is one the hardware executes. Element types are checked here too,
//! against `amx_tilecfg::DOT_ELEMENTS`: TDPB[SU][SU]D takes i8/u8 A and B into an i32 C;
//! TDPBF16PS bf16 into f32; TDPFP16PS and the TCMM*FP16PS f16 into f32; the TDP[BH][BH]F8PS bf8
//! or hf8 into f32. A tile written without an element type (raw bytes) fits any role.
//!
//! Besides the real implementations, each handle gets a few "decoy" implementations (generic,
//! never matching a real handle) so that rustc cannot guess an operand's type from the only
//! fitting triple; without them a mismatch is reported as "mismatched types" instead of
//! `Dot`'s message naming the tiles and shapes.

use amx_tilecfg::{check_dot, image, ElemType, TileShape, TmulLimits, DOT_ELEMENTS};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

use crate::ast::{Config, Header, Stmt};
use crate::lower;
use syn::ext::IdentExt;

/// One named tile: its register, its shape in the image, and its element type.
struct Named<'a> {
    name: &'a Ident,
    docs: &'a [syn::Attribute],
    index: u8,
    shape: TileShape,
    elem: Option<ElemType>,
}

/// The items of the item form. `config` is the expression of the validated configuration, or
/// of INIT when there were errors (then every operand triple gets a stand-in `Dot`, so the
/// errors of the input are the only ones reported; the crate does not compile either way).
pub fn items(
    header: &Header,
    parsed: &Config,
    image: Option<&[u8; 64]>,
    config: TokenStream,
) -> TokenStream {
    let Header { attrs, vis, ident } = header;
    let module = tiles_module(ident);
    let module_doc = format!(
        "The tile names of [`{ident}`]: the first parameter of its handles' `Tile<name, ..>` \
         types. Compiler messages name a tile by its path here when another layout has a tile \
         of the same name."
    );
    let named = named_tiles(parsed, image);
    // Every item goes where the struct goes: its `#[cfg]`s are repeated on each of them (the
    // other attributes are the struct's own), and uses of a `#[deprecated]` layout inside the
    // generated items are not the user's.
    let cfgs: Vec<&syn::Attribute> = attrs.iter().filter(|a| a.path().is_ident("cfg")).collect();
    let gate = quote!(#(#cfgs)* #[allow(deprecated)]);

    let inner_vis = inner_visibility(vis);
    let markers = named.iter().map(|t| {
        let name = t.name;
        quote! {
            #[doc = "The name of a tile of the layout."]
            #inner_vis enum #name {}
        }
    });
    let tile_names = named.iter().map(|t| {
        let name = t.name;
        quote! {
            #gate
            // SAFETY: the handle of this name (below) has the register and shape that the
            // layout's CONFIG gives the tile; the macro derived both from the same statements.
            unsafe impl ::amx_runtime::typed::TileName for #module::#name {
                type Layout = #ident;
            }
        }
    });
    let handles = named.iter().map(|t| {
        let name = t.name;
        let ty = handle_type(&module, t);
        let doc = format!(
            "Tile t{}: {} rows of {} bytes{}.",
            t.index,
            t.shape.rows,
            t.shape.colsb,
            t.elem.map_or(String::new(), |e| format!(" of {e}"))
        );
        let user_docs = t.docs;
        let separator = (!user_docs.is_empty()).then(|| quote!(#[doc = ""]));
        quote! {
            #(#user_docs)*
            #separator
            #[doc = #doc]
            #[allow(non_upper_case_globals)]
            #vis const #name: #ty = {
                // SAFETY: tile t{index} of Self::CONFIG has exactly this shape (see above).
                unsafe { ::amx_runtime::typed::Tile::__new() }
            };
        }
    });
    let (dots, decoys) = match image {
        Some(_) => (
            dot_impls(ident, &module, &named),
            decoy_impls(ident, &module, &named),
        ),
        None => (Vec::new(), stand_in_impls(ident, &module, &named)),
    };

    quote! {
        #(#attrs)*
        #vis struct #ident;

        #gate
        #[doc = #module_doc]
        #[allow(non_camel_case_types, non_snake_case)]
        #vis mod #module {
            #(#markers)*
        }

        #gate
        // SAFETY: every handle and every `Dot` implementation of this layout is generated from
        // the same validated statements as CONFIG.
        unsafe impl ::amx_runtime::typed::Layout for #ident {
            const CONFIG: ::amx_runtime::TileConfig = #config;
        }

        #(#tile_names)*

        #gate
        impl #ident {
            /// The layout's tile configuration, checked at compile time.
            #vis const CONFIG: ::amx_runtime::TileConfig =
                <#ident as ::amx_runtime::typed::Layout>::CONFIG;

            /// Configures this layout on the calling thread and returns its typed tiles.
            #vis fn configure() -> ::core::result::Result<
                ::amx_runtime::typed::TypedTiles<#ident>,
                ::amx_runtime::ConfigureError,
            > {
                ::amx_runtime::typed::configure_typed::<#ident>()
            }

            #(#handles)*
        }

        #(#gate #dots)*
        #(#gate #decoys)*
    }
}

/// The module of a layout's tile names: the layout's name in snake case with `_tiles`
/// (`Int8Block` -> `int8_block_tiles`), a path that reads well in a compiler message.
fn tiles_module(layout: &Ident) -> Ident {
    let name = layout.unraw().to_string();
    let mut snake = String::with_capacity(name.len() + 8);
    let mut previous: Option<char> = None;
    for c in name.chars() {
        if c.is_uppercase() {
            if previous.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit()) {
                snake.push('_');
            }
            snake.extend(c.to_lowercase());
        } else {
            snake.push(c);
        }
        previous = Some(c);
    }
    format_ident!("{}_tiles", snake, span = layout.span())
}

/// The visibility, seen from inside the tile names' module, that equals `vis` seen from outside it
/// (so the marker types are exactly as visible as the layout that names them).
fn inner_visibility(vis: &syn::Visibility) -> TokenStream {
    match vis {
        syn::Visibility::Public(_) => quote!(pub),
        syn::Visibility::Inherited => quote!(pub(super)),
        syn::Visibility::Restricted(r) => {
            let path = &r.path;
            if path.is_ident("crate") {
                quote!(pub(crate))
            } else if path.is_ident("self") {
                quote!(pub(super))
            } else if path.is_ident("super") {
                quote!(pub(in super::super))
            } else if path.leading_colon.is_none()
                && path.segments.first().is_some_and(|s| s.ident == "crate")
            {
                quote!(pub(in #path))
            } else {
                quote!(pub(in super::#path))
            }
        }
    }
}

fn named_tiles<'a>(parsed: &'a Config, image: Option<&[u8; 64]>) -> Vec<Named<'a>> {
    let mut seen: Vec<String> = Vec::new();
    parsed
        .stmts
        .iter()
        .filter_map(|stmt| match stmt {
            Stmt::Tile(tile) => {
                let name = tile.name.as_ref()?;
                // A name given twice, or one the layout's items already take, is already an
                // error (`lower::check_names`); a handle of that name would only add rustc's
                // "defined multiple times" to it.
                let text = name.unraw().to_string();
                let layout = parsed.header.as_ref().map(|h| &h.ident);
                if seen.contains(&text) || lower::name_problem(name, &tile.key, layout).is_some() {
                    return None;
                }
                seen.push(text);
                let index = u8::try_from(tile.index)
                    .ok()
                    .filter(|&i| (i as usize) < image::TILE_SLOTS)?;
                let shape = match image {
                    Some(image) => image::shape(image, index),
                    // With errors the shape only needs to be a type: it can never execute.
                    None => TileShape::new(0, 0),
                };
                Some(Named {
                    name,
                    docs: &tile.docs,
                    index,
                    shape,
                    elem: tile.shape.elem.as_ref().map(|e| e.ty),
                })
            }
            _ => None,
        })
        .collect()
}

fn elem_type(elem: Option<ElemType>) -> TokenStream {
    match elem {
        None => quote!(::amx_runtime::typed::Bytes),
        // Full paths: a user type named `i8` must not take the primitive's place.
        Some(ElemType::I8) => quote!(::core::primitive::i8),
        Some(ElemType::U8) => quote!(::core::primitive::u8),
        Some(ElemType::I32) => quote!(::core::primitive::i32),
        Some(ElemType::F32) => quote!(::core::primitive::f32),
        Some(ElemType::Bf16) => quote!(::amx_runtime::typed::BF16),
        Some(ElemType::F16) => quote!(::amx_runtime::typed::FP16),
        Some(ElemType::Bf8) => quote!(::amx_runtime::typed::BF8),
        Some(ElemType::Hf8) => quote!(::amx_runtime::typed::HF8),
    }
}

fn handle_type(module: &Ident, t: &Named) -> TokenStream {
    let name = t.name;
    let (index, rows, colsb) = (t.index, t.shape.rows, t.shape.colsb);
    let elem = elem_type(t.elem);
    quote!(::amx_runtime::typed::Tile<#module::#name, #index, #rows, #colsb, #elem>)
}

fn fits(elem: Option<ElemType>, wanted: ElemType) -> bool {
    elem.is_none_or(|e| e == wanted)
}

fn dot_impls(layout: &Ident, module: &Ident, named: &[Named]) -> Vec<TokenStream> {
    let mut out = Vec::new();
    for (op, [ce, ae, be]) in DOT_ELEMENTS {
        let op = Ident::new(op, Span::call_site());
        for c in named {
            for a in named {
                for b in named {
                    let shapes_fit = check_dot(
                        (c.index, c.shape),
                        (a.index, a.shape),
                        (b.index, b.shape),
                        TmulLimits::ARCHITECTURAL,
                    )
                    .is_ok();
                    let elems_fit = fits(c.elem, ce) && fits(a.elem, ae) && fits(b.elem, be);
                    if !(shapes_fit && elems_fit) {
                        continue;
                    }
                    let (ct, at, bt) = (
                        handle_type(module, c),
                        handle_type(module, a),
                        handle_type(module, b),
                    );
                    out.push(quote! {
                        // SAFETY: amx_tilecfg::check_dot accepted these operands under CONFIG,
                        // and their element types are the instruction's.
                        unsafe impl ::amx_runtime::typed::Dot<#layout, ::amx_runtime::typed::op::#op, #at, #bt> for #ct {}
                    });
                }
            }
        }
    }
    out
}

/// With errors in the input: every operand triple "fits", so a kernel that is correct for the
/// configuration the user meant reports nothing beyond the input's own errors (the crate fails
/// to compile anyway, so nothing can run).
fn stand_in_impls(layout: &Ident, module: &Ident, named: &[Named]) -> Vec<TokenStream> {
    named
        .iter()
        .map(|c| {
            let ct = handle_type(module, c);
            quote! {
                // SAFETY: emitted only beside a compile error, so never part of a program.
                unsafe impl<Op, A, B> ::amx_runtime::typed::Dot<#layout, Op, A, B> for #ct {}
            }
        })
        .collect()
}

fn decoy_impls(layout: &Ident, module: &Ident, named: &[Named]) -> Vec<TokenStream> {
    let mut out = Vec::new();
    let decoys = [
        quote!(::amx_runtime::typed::Decoy),
        quote!(::amx_runtime::typed::Decoy2),
    ];
    for c in named {
        let ct = handle_type(module, c);
        for decoy in &decoys {
            out.push(quote! {
                #[diagnostic::do_not_recommend]
                // SAFETY: no handle is a decoy, so this never admits a real operand.
                unsafe impl<Op, X, Y> ::amx_runtime::typed::Dot<#layout, Op, #decoy<X>, Y> for #ct {}
            });
            for a in named {
                let at = handle_type(module, a);
                out.push(quote! {
                    #[diagnostic::do_not_recommend]
                    // SAFETY: as above.
                    unsafe impl<Op, X> ::amx_runtime::typed::Dot<#layout, Op, #at, #decoy<X>> for #ct {}
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_names_live_in_a_snake_case_module() {
        let module = |name: &str| tiles_module(&Ident::new(name, Span::call_site())).to_string();
        assert_eq!(module("Int8Block"), "int8_block_tiles");
        assert_eq!(module("L2"), "l2_tiles");
        assert_eq!(module("GEMM"), "gemm_tiles");
        assert_eq!(module("Bf16x2Edge"), "bf16x2_edge_tiles");
        assert_eq!(module("layout"), "layout_tiles");
    }
}
