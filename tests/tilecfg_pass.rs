//! Every syntax form of `tilecfg!` that compiles, each checked byte for byte against the
//! LDTILECFG image written out by hand (docs/semantics.md section 2: palette_id at 0, start_row at 1,
//! tile t's colsb as a little-endian u16 at 16 + 2t, its rows at 48 + t, every other byte 0).

use amx_runtime::{tilecfg, TileConfig};

// The image of `palette`, `start_row` and the tiles `(t, rows, colsb)`, built independently of
// the macro and of `amx_tilecfg::image`.
use amx_test_support::image::image;

#[test]
fn braces() {
    let cfg = tilecfg! { palette 1; t0: 16x64 };
    assert_eq!(cfg.as_bytes(), &image(1, 0, &[(0, 16, 64)]));
}

#[test]
fn parentheses() {
    let cfg = tilecfg!(palette 1; t2: 8x32);
    assert_eq!(cfg.as_bytes(), &image(1, 0, &[(2, 8, 32)]));
}

#[test]
fn brackets() {
    let cfg = tilecfg![palette 1; t7: 1x4];
    assert_eq!(cfg.as_bytes(), &image(1, 0, &[(7, 1, 4)]));
}

#[test]
fn every_spacing_around_x() {
    let expected = image(1, 0, &[(0, 16, 64), (1, 12, 48), (2, 2, 8), (3, 3, 12)]);
    let cfg = tilecfg! {
        palette 1;
        t0: 16x64;
        t1: 12 x 48;
        t2: 2x 8;
        t3: 3 x12;
    };
    assert_eq!(cfg.as_bytes(), &expected);
}

#[test]
fn typed_columns_count_elements() {
    let cfg = tilecfg! {
        palette 1;
        t0: 16x16 i32;
        t1: 16x16 f32;
        t2: 16x32 bf16;
        t3: 16x32 f16;
        t4: 16x64 i8;
        t5: 16x64 u8;
        t6: 4 x 3 i32;
        t7: 4 x 2 bf16;
    };
    let expected = image(
        1,
        0,
        &[
            (0, 16, 64),
            (1, 16, 64),
            (2, 16, 64),
            (3, 16, 64),
            (4, 16, 64),
            (5, 16, 64),
            (6, 4, 12),
            (7, 4, 4),
        ],
    );
    assert_eq!(cfg.as_bytes(), &expected);
}

#[test]
fn names_are_accepted_in_a_layout() {
    tilecfg! {
        struct Named;
        palette 1;
        t0 as c: 16x16 i32;
        t4 as a: 16x64 i8;
        t6 as b_vnni: 16x64;
    }
    assert_eq!(
        Named::CONFIG.as_bytes(),
        &image(1, 0, &[(0, 16, 64), (4, 16, 64), (6, 16, 64)])
    );
}

#[test]
fn trailing_semicolon_is_optional() {
    let with = tilecfg! { palette 1; t0: 16x64; };
    let without = tilecfg! { palette 1; t0: 16x64 };
    assert_eq!(with.as_bytes(), &image(1, 0, &[(0, 16, 64)]));
    assert_eq!(without.as_bytes(), with.as_bytes());
}

#[test]
fn tiles_in_any_order() {
    let cfg = tilecfg! { palette 1; t5: 4x16; t1: 2x8; start_row 1; t3: 16x64 };
    assert_eq!(
        cfg.as_bytes(),
        &image(1, 1, &[(1, 2, 8), (3, 16, 64), (5, 4, 16)])
    );
}

#[test]
fn start_row() {
    let cfg = tilecfg! { palette 1; start_row 15; t0: 16x64; t1: 16 x 16 i32 };
    assert_eq!(cfg.as_bytes(), &image(1, 15, &[(0, 16, 64), (1, 16, 64)]));
}

#[test]
fn palette_1_alone_uses_no_tile() {
    let cfg = tilecfg! { palette 1 };
    assert_eq!(cfg.as_bytes(), &image(1, 0, &[]));
}

#[test]
fn palette_0_is_init() {
    let cfg = tilecfg! { palette 0 };
    assert_eq!(cfg.as_bytes(), &[0u8; 64]);
    assert_eq!(cfg, TileConfig::INIT);
    let cfg = tilecfg! { palette 0; };
    assert_eq!(cfg, TileConfig::INIT);
}

#[test]
fn largest_numbers_that_fit() {
    let cfg = tilecfg! { palette 1; t0: 16x64; t1: 1x4; t2: 16 x 16 f32; t3: 1_6 x 6_4 };
    assert_eq!(
        cfg.as_bytes(),
        &image(1, 0, &[(0, 16, 64), (1, 1, 4), (2, 16, 64), (3, 16, 64)])
    );
}

static GEMM: TileConfig = tilecfg! { palette 1; t0: 16x16 i32; t4: 16x64; t6: 16x64 };
const SMALL: TileConfig = tilecfg! { palette 1; start_row 2; t1: 4x8 };
static INIT: TileConfig = tilecfg! { palette 0 };

#[test]
fn static_and_const() {
    assert_eq!(
        GEMM.as_bytes(),
        &image(1, 0, &[(0, 16, 64), (4, 16, 64), (6, 16, 64)])
    );
    assert_eq!(SMALL.as_bytes(), &image(1, 2, &[(1, 4, 8)]));
    assert_eq!(INIT.as_bytes(), &[0u8; 64]);
}

#[test]
fn static_is_64_byte_aligned() {
    assert_eq!(std::mem::align_of_val(&GEMM), 64);
    assert_eq!(std::mem::size_of_val(&GEMM), 64);
    assert_eq!(&GEMM as *const TileConfig as usize % 64, 0);
    assert_eq!(GEMM.as_bytes().as_ptr() as usize % 64, 0);
    assert_eq!(INIT.as_bytes().as_ptr() as usize % 64, 0);
}

#[test]
fn const_usable_in_const_context() {
    const PALETTE: u8 = SMALL.palette();
    const START: u8 = SMALL.start_row();
    assert_eq!((PALETTE, START), (1, 2));
}

#[test]
fn equals_the_runtime_builder() {
    let built = TileConfig::builder()
        .tile(0, 16, 64)
        .tile(4, 16, 64)
        .tile(6, 16, 64)
        .build()
        .unwrap();
    assert_eq!(built, GEMM);
    assert!(GEMM.use_violations().is_empty());
}

#[test]
fn underscores_in_glued_columns() {
    // `16x6_4` is the integer 16 with the suffix `x6_4`: the columns read as `6_4` would.
    let glued = tilecfg! { palette 1; t0: 16x6_4; t1: 1_6x64_ };
    let spaced = tilecfg! { palette 1; t0: 16 x 6_4; t1: 1_6 x 64 };
    assert_eq!(glued, spaced);
    assert_eq!(glued.as_bytes(), &image(1, 0, &[(0, 16, 64), (1, 16, 64)]));
}

#[test]
fn doc_comments_before_statements() {
    let cfg = tilecfg! {
        /// The configuration of a 16x16 int8 block.
        palette 1;
        /// The accumulator.
        t0: 16x16 i32;
    };
    assert_eq!(cfg.as_bytes(), &image(1, 0, &[(0, 16, 64)]));
}

/// The item form where user names could collide with what it generates: a type named like a
/// primitive element type, raw identifiers, a `cfg`-ed out and a deprecated layout.
mod layouts {
    #![allow(non_camel_case_types, dead_code)]

    use amx_runtime::tilecfg;

    /// Shadows the primitive in this module; the handles must still hold `i32` elements.
    struct i32;

    tilecfg! {
        /// A layout whose handles are documented.
        pub struct Block;
        palette 1;
        /// The accumulator.
        t0 as c: 16x16 i32;
        t4 as r#a: 16x64 i8;
        t6 as r#try: 16x64 i8;
    }

    tilecfg! {
        #[cfg(any())]
        pub struct Gone;
        palette 1;
        t0 as c: 16x16 i32;
    }

    tilecfg! {
        #[deprecated = "the generated items must not warn about this"]
        pub struct Old;
        palette 1;
        t0 as c: 16x16 i32;
    }

    #[test]
    fn compile_and_run_where_names_could_collide() {
        let mut tiles = Block::configure().unwrap();
        tiles.zero(Block::c);
        tiles.load(Block::a, &[1i8; 1024], 64).unwrap();
        tiles.load(Block::r#try, &[2i8; 1024], 64).unwrap();
        tiles.tdpbssd(Block::c, Block::a, Block::r#try);
        let mut c = [0; 256];
        tiles.store(Block::c, &mut c, 16).unwrap();
        assert!(c.iter().all(|&x: &::core::primitive::i32| x == 128));
    }
}

/// Crates that forbid `unsafe` can use both forms: what the expansion needs unsafe for (the
/// constructor whose precondition the macro has just checked, the sealed layout traits) is the
/// macro's business, not the caller's.
mod without_unsafe {
    #![forbid(unsafe_code)]

    use amx_runtime::{tilecfg, TileConfig};

    static CFG: TileConfig = tilecfg! { palette 1; t0: 16x64 };

    tilecfg! {
        pub struct Safe;
        palette 1;
        t0 as c: 16x16 i32;
    }

    #[test]
    fn both_forms_compile_under_forbid_unsafe_code() {
        assert_eq!(CFG.as_bytes(), &super::image(1, 0, &[(0, 16, 64)]));
        assert_eq!(Safe::CONFIG.as_bytes(), &super::image(1, 0, &[(0, 16, 64)]));
    }
}
