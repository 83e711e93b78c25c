//! The crate's error types work as `core::error::Error`s, and `ElemType` parses from its name.

use core::error::Error;

use amx_tilecfg::image::{self, SIZE};
use amx_tilecfg::{
    check_dot, validate, DotMismatch, ElemType, NoSuchTile, PaletteTable, ParseElemTypeError,
    TileShape, TmulLimits, Violation,
};

/// Passes `err` through `Box<dyn Error>`, as `?` in an application does, and returns its
/// message; none of the crate's errors has a source.
fn as_dyn_error<E: Error + Send + Sync + 'static>(err: E) -> String {
    let boxed: Box<dyn Error + Send + Sync> = Box::new(err);
    assert!(boxed.source().is_none());
    assert!(boxed.downcast_ref::<E>().is_some());
    boxed.to_string()
}

#[test]
fn violations_are_errors() {
    let mut bytes = [0u8; SIZE];
    bytes[0] = 1;
    bytes[image::rows_offset(3)] = 17;
    bytes[image::colsb_offset(3)] = 64;
    let v: Violation = *validate(&bytes, &PaletteTable::ARCHITECTURAL)
        .iter()
        .next()
        .unwrap();
    assert_eq!(
        as_dyn_error(v),
        "tile t3 has 17 rows; palette 1 allows at most 16 (max_rows)"
    );
}

#[test]
fn dot_mismatches_are_errors() {
    let m: DotMismatch = check_dot(
        (0, TileShape::new(2, 8)),
        (0, TileShape::new(2, 8)),
        (1, TileShape::new(2, 8)),
        TmulLimits::ARCHITECTURAL,
    )
    .unwrap_err();
    assert_eq!(
        as_dyn_error(m),
        "operands C and A are both tile t0; C, A and B must be three different tiles"
    );
}

#[test]
fn no_such_tile_is_an_error_with_a_sentence_per_palette() {
    let err = |tile, palette, max_names| NoSuchTile {
        tile,
        palette,
        max_names,
    };
    assert_eq!(
        as_dyn_error(err(8, 1, 8)),
        "there is no tile t8; palette 1 has 8 tiles, t0 to t7 (max_names)"
    );
    assert_eq!(
        as_dyn_error(err(2, 0, 8)),
        "there is no tile t2; palette 0 (INIT) has no tiles"
    );
    assert_eq!(
        as_dyn_error(err(0, 3, 0)),
        "there is no tile t0; palette 3 has no tiles"
    );
    assert_eq!(
        as_dyn_error(err(u64::MAX, 2, 1)),
        format!(
            "there is no tile t{}; palette 2 has 1 tile, t0 (max_names)",
            u64::MAX
        )
    );
}

#[test]
fn elem_types_parse_from_their_names() {
    for t in ElemType::ALL {
        assert_eq!(t.name().parse::<ElemType>(), Ok(t));
        assert_eq!(t.to_string().parse::<ElemType>(), Ok(t));
        assert_eq!(ElemType::from_name(t.name()), Some(t));
    }
    let names: Vec<&str> = ElemType::ALL.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        ["i8", "u8", "bf16", "f16", "i32", "f32", "bf8", "hf8"]
    );
}

#[test]
fn parsing_is_exact_like_from_name() {
    for text in [
        "", "I8", "BF16", " i8", "i8 ", "f64", "bf", "bf16x", "i 8", "int8", "BF8", "e5m2", "fp8",
    ] {
        assert_eq!(ElemType::from_name(text), None, "{text:?}");
        let err: ParseElemTypeError = text.parse::<ElemType>().unwrap_err();
        assert_eq!(
            as_dyn_error(err),
            "unknown element type; expected one of i8, u8, bf16, f16, i32, f32, bf8, hf8",
            "{text:?}"
        );
    }
}

#[test]
fn element_sizes() {
    let sizes: Vec<(ElemType, u16)> = ElemType::ALL.iter().map(|t| (*t, t.size())).collect();
    assert_eq!(
        sizes,
        [
            (ElemType::I8, 1),
            (ElemType::U8, 1),
            (ElemType::Bf16, 2),
            (ElemType::F16, 2),
            (ElemType::I32, 4),
            (ElemType::F32, 4),
            (ElemType::Bf8, 1),
            (ElemType::Hf8, 1),
        ]
    );
}
