//! `TileConfig::from_bytes` against an independent transcription of the LDTILECFG pseudocode, and
//! the run-time builder against the 64-byte image encoder.

use amx_runtime::{ElemType, TileConfig, TileShape};
use amx_test_support::image::{image, TileImage};
use proptest::prelude::*;
use proptest::sample::select;

/// docs/semantics.md section 2, the [DOC] pseudocode of LDTILECFG, transcribed as literally as
/// possible for the architectural palette table (CPUID leaf 0x1D of every AMX CPU to date):
/// max_palette 1, and
/// palette 1 with max_names 8, bytes_per_row 64, max_rows 16. Returns whether LDTILECFG accepts
/// `mem` (no #GP). Deliberately shares no code with `amx_tilecfg`.
fn ldtilecfg_accepts(mem: &[u8; 64]) -> bool {
    const MAX_PALETTE: u8 = 1;
    const BYTES_PER_ROW: u16 = 64;
    const MAX_ROWS: u8 = 16;

    let palette_id = mem[0];
    let mut error = false;
    // error if palette_id > max_palette or the palette is not supported by XCR0.
    // (With XCR0 bits 17 and 18 set, as on every OS that enables AMX, every palette up to
    // max_palette is.)
    if palette_id > MAX_PALETTE {
        error = true;
    }
    // If palette_id != 0:
    if palette_id != 0 {
        // start_row := byte1 (not validated).
        let _start_row = mem[1];
        // Reserved bytes 2..15, 32..47 and 56..63 must be zero.
        for byte in (2..=15).chain(32..=47).chain(56..=63) {
            if mem[byte] != 0 {
                error = true;
            }
        }
        for t in 0..8 {
            let colsb = u16::from_le_bytes([mem[16 + 2 * t], mem[16 + 2 * t + 1]]);
            let rows = mem[48 + t];
            // Each colsb must be <= bytes_per_row and each rows <= max_rows.
            if colsb > BYTES_PER_ROW {
                error = true;
            }
            if rows > MAX_ROWS {
                error = true;
            }
            // For each tile, rows==0 and colsb==0 together, or both nonzero; otherwise error.
            let both_zero = rows == 0 && colsb == 0;
            let both_nonzero = rows != 0 && colsb != 0;
            if !(both_zero || both_nonzero) {
                error = true;
            }
        }
    }
    // If error: #GP.
    !error
}

/// Every reserved byte offset of the image.
fn reserved_offsets() -> Vec<usize> {
    (2..16).chain(32..48).chain(56..64).collect()
}

/// Palette ids, mostly the interesting ones.
fn palette_id() -> impl Strategy<Value = u8> {
    prop_oneof![5 => Just(1u8), 2 => Just(0u8), 1 => Just(2u8), 1 => any::<u8>()]
}

/// Rows, mostly valid or at the limit.
fn rows() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 1u8..=16, 2 => 15u8..=18, 1 => Just(0u8), 1 => any::<u8>()]
}

/// Bytes per row, mostly valid or at the limit, with high-byte-only values the silicon rejects.
fn colsb() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => (1u16..=16).prop_map(|k| 4 * k),
        2 => 60u16..=68,
        1 => Just(0u16),
        1 => select(vec![1u16, 6, 63, 0x100, 0x140, 0x4000, 0xffff]),
        1 => any::<u16>(),
    ]
}

/// A tile LDTILECFG accepts: unused, or at most 16 rows of at most 64 bytes.
fn valid_tile() -> impl Strategy<Value = (u8, u16)> {
    prop_oneof![2 => Just((0u8, 0u16)), 3 => (1u8..=16, 1u16..=64)]
}

/// One change that may make an image invalid (or keep it valid: the values include valid ones).
#[derive(Clone, Debug)]
enum Mutation {
    Rows(u8, u8),
    Colsb(u8, u16),
    Reserved(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        2 => (0..8u8, rows()).prop_map(|(t, v)| Mutation::Rows(t, v)),
        2 => (0..8u8, colsb()).prop_map(|(t, v)| Mutation::Colsb(t, v)),
        1 => (select(reserved_offsets()), 1u8..=255).prop_map(|(o, v)| Mutation::Reserved(o, v)),
    ]
}

/// 64-byte images biased towards near-valid ones: a valid palette-1 layout, often changed in one
/// or two fields, under a palette id that is mostly 1 but also 0, 2 or anything.
fn near_valid_image() -> impl Strategy<Value = [u8; 64]> {
    (
        palette_id(),
        prop_oneof![3 => 0u8..4, 1 => any::<u8>()],
        prop::array::uniform8(valid_tile()),
        prop_oneof![
            3 => Just(Vec::new()),
            3 => prop::collection::vec(mutation(), 1..=1),
            1 => prop::collection::vec(mutation(), 2..=2),
        ],
    )
        .prop_map(|(palette, start_row, tiles, mutations)| {
            let mut image = TileImage::palette(palette).start_row(start_row);
            for (t, (rows, colsb)) in (0u8..).zip(tiles) {
                image = image.tile(t, rows, colsb);
            }
            for m in mutations {
                image = match m {
                    Mutation::Rows(t, rows) => image.rows(t, rows),
                    Mutation::Colsb(t, colsb) => image.colsb(t, colsb),
                    Mutation::Reserved(offset, value) => image.byte(offset, value),
                };
            }
            image.bytes()
        })
}

/// Any image at all.
fn any_image() -> impl Strategy<Value = [u8; 64]> {
    prop::array::uniform32(any::<u8>()).prop_flat_map(|low| {
        prop::array::uniform32(any::<u8>()).prop_map(move |high| {
            let mut mem = [0u8; 64];
            mem[..32].copy_from_slice(&low);
            mem[32..].copy_from_slice(&high);
            mem
        })
    })
}

/// The image `TileConfig` keeps: the bytes given, except that palette 0 is INIT, all zero,
/// whatever the other bytes held (LDTILECFG ignores them, L4).
fn canonical(mem: &[u8; 64]) -> [u8; 64] {
    if mem[0] == 0 {
        [0; 64]
    } else {
        *mem
    }
}

fn check_against_pseudocode(mem: &[u8; 64]) -> Result<(), TestCaseError> {
    let parsed = TileConfig::from_bytes(mem);
    prop_assert_eq!(
        parsed.is_ok(),
        ldtilecfg_accepts(mem),
        "image {:02x?}: from_bytes says {:?}",
        mem,
        parsed
    );
    if let Ok(config) = parsed {
        prop_assert_eq!(config.as_bytes(), &canonical(mem));
    }
    Ok(())
}

proptest! {
    #![proptest_config(amx_test_support::proptest_config(4096))]

    /// `from_bytes` accepts exactly what LDTILECFG accepts, and keeps the image byte for byte.
    #[test]
    fn from_bytes_accepts_what_ldtilecfg_accepts(mem in near_valid_image()) {
        check_against_pseudocode(&mem)?;
    }

    /// The same on uniformly random images (almost all rejected).
    #[test]
    fn from_bytes_on_random_images(mem in any_image()) {
        check_against_pseudocode(&mem)?;
    }
}

/// A tile as the DSL can write it: rows, and columns counted in bytes or in elements of a type.
fn dsl_tile() -> impl Strategy<Value = TileShape> {
    let elem = prop_oneof![
        2 => Just(None),
        1 => select(ElemType::ALL.to_vec()).prop_map(Some),
    ];
    // colsb = cols * size, a multiple of 4 in 4..=64 (use-time rules included).
    (1u8..=16, 1u16..=16, elem).prop_map(|(rows, dwords, elem)| {
        let size = elem.map_or(1, ElemType::size);
        let cols = 4 * dwords / size;
        TileShape::new(rows, cols * size)
    })
}

proptest! {
    #![proptest_config(amx_test_support::proptest_config(1024))]

    /// The builder (the macro's checks at run time) and `from_bytes` of the image written out
    /// by hand (docs/semantics.md section 2, not `amx_tilecfg::image::encode`, which the builder
    /// uses) agree on every valid DSL-equivalent configuration.
    #[test]
    fn builder_equals_encoded_image(
        shapes in prop::array::uniform8(prop::option::weighted(0.6, dsl_tile())),
        start in any::<u8>(),
    ) {
        let min_rows = shapes.iter().flatten().map(|s| s.rows).min();
        let start_row = min_rows.map_or(start, |rows| start % rows);

        let mut builder = TileConfig::builder().palette(1).start_row(start_row);
        for (t, shape) in shapes.iter().enumerate() {
            if let Some(shape) = shape {
                builder = builder.tile(t as u8, shape.rows, shape.colsb);
            }
        }
        let built = builder.build();
        prop_assert!(built.is_ok(), "builder rejected {:?}: {:?}", shapes, built);
        let built = built.unwrap();

        let mut encoded = TileImage::palette(1).start_row(start_row);
        for (t, shape) in (0u8..).zip(&shapes) {
            if let Some(shape) = shape {
                encoded = encoded.tile(t, shape.rows, shape.colsb);
            }
        }
        let encoded = encoded.bytes();
        let parsed = TileConfig::from_bytes(&encoded);
        prop_assert!(parsed.is_ok(), "from_bytes rejected {:02x?}", encoded);
        prop_assert_eq!(built, parsed.unwrap());
        prop_assert_eq!(built.as_bytes(), &encoded);
        prop_assert!(built.use_violations().is_empty());
    }
}

/// The transcription itself, on the hardware observations of docs/semantics.md section 2 (L1, L3, L4).
#[test]
fn pseudocode_matches_the_measured_cases() {
    let config = |palette: u8, tiles: &[(u8, u8, u16)]| image(palette, 0, tiles);
    let mut rejected = Vec::new();
    // L1: each reserved byte, palettes 2, 3, 128, 255, colsb 65 (also on t7), 0x100, 0x140,
    // rows 17 and 255, rows 16 with colsb 0 and rows 0 with colsb 64.
    for offset in reserved_offsets() {
        let mut mem = config(1, &[(0, 16, 64)]);
        mem[offset] = if (32..48).contains(&offset) {
            0x80
        } else {
            0x01
        };
        rejected.push(mem);
    }
    for palette in [2, 3, 128, 255] {
        rejected.push(config(palette, &[(0, 16, 64)]));
    }
    for (t, rows, colsb) in [
        (0, 16, 65),
        (7, 16, 65),
        (0, 16, 0x100),
        (0, 16, 0x140),
        (0, 17, 64),
        (0, 255, 64),
        (0, 16, 0),
        (0, 0, 64),
    ] {
        rejected.push(config(1, &[(t, rows, colsb)]));
    }
    for mem in &rejected {
        assert!(!ldtilecfg_accepts(mem), "{mem:02x?}");
        assert!(TileConfig::from_bytes(mem).is_err(), "{mem:02x?}");
    }

    // L3: unused tiles, palette 1 alone, colsb 1, 6, 63, any start_row.
    let mut accepted = vec![
        config(1, &[]),
        config(1, &[(0, 3, 1), (1, 3, 6), (2, 3, 63)]),
    ];
    for start_row in [0, 3, 16, 200, 255] {
        accepted.push(image(1, start_row, &[(0, 3, 64)]));
    }
    // L4: palette 0 ignores every other byte.
    let mut init = [0xffu8; 64];
    init[0] = 0;
    init[1] = 7;
    accepted.push(init);
    for mem in &accepted {
        assert!(ldtilecfg_accepts(mem), "{mem:02x?}");
        assert_eq!(
            TileConfig::from_bytes(mem).unwrap().as_bytes(),
            &canonical(mem)
        );
    }
}

/// The near-valid generator really is near the boundary: among palette-1 images, a good share is
/// accepted and a good share rejected (otherwise the property above would test little).
#[test]
fn near_valid_images_fall_on_both_sides() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = near_valid_image();
    let (mut accepted, mut rejected) = (0, 0);
    for _ in 0..4000 {
        let mem = strategy.new_tree(&mut runner).unwrap().current();
        if mem[0] != 1 {
            continue;
        }
        if ldtilecfg_accepts(&mem) {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    let total = accepted + rejected;
    assert!(total > 1000, "{total} palette-1 images");
    assert!(accepted * 4 > total, "only {accepted} of {total} accepted");
    assert!(rejected * 4 > total, "only {rejected} of {total} rejected");
}
