//! The 64-byte image: `encode` writes each field where the accessors (and LDTILECFG) read it.

use amx_tilecfg::image::{self, SIZE, TILE_SLOTS};
use amx_tilecfg::TileShape;
use proptest::prelude::*;

#[test]
fn encode_writes_the_documented_layout() {
    let mut shapes = [None; TILE_SLOTS];
    shapes[0] = Some(TileShape::new(16, 64));
    shapes[3] = Some(TileShape::new(2, 0x0140));
    shapes[7] = Some(TileShape::new(255, 0xABCD));
    let bytes = image::encode(1, 9, &shapes);
    let mut expected = [0u8; SIZE];
    expected[0] = 1; // palette_id
    expected[1] = 9; // start_row
    expected[16] = 64; // t0 colsb, little-endian
    expected[22] = 0x40; // t3 colsb low byte
    expected[23] = 0x01; // t3 colsb high byte
    expected[30] = 0xCD; // t7 colsb low byte
    expected[31] = 0xAB;
    expected[48] = 16; // t0 rows
    expected[51] = 2; // t3 rows
    expected[55] = 255; // t7 rows
    assert_eq!(bytes, expected);
    assert_eq!(
        (
            image::PALETTE_ID,
            image::START_ROW,
            image::COLSB,
            image::ROWS
        ),
        (0, 1, 16, 48)
    );
}

#[test]
fn accessors_read_back_what_encode_wrote() {
    let mut shapes = [None; TILE_SLOTS];
    shapes[1] = Some(TileShape::new(3, 12));
    shapes[6] = Some(TileShape::new(16, 0x0100));
    let bytes = image::encode(7, 200, &shapes);
    assert_eq!(image::palette_id(&bytes), 7);
    assert_eq!(image::start_row(&bytes), 200);
    for (t, given) in (0u8..).zip(&shapes) {
        let want = given.unwrap_or(TileShape::new(0, 0));
        assert_eq!(image::shape(&bytes, t), want, "t{t}");
        assert_eq!(image::rows(&bytes, t), want.rows, "t{t}");
        assert_eq!(image::colsb(&bytes, t), want.colsb, "t{t}");
        assert_eq!(image::shape(&bytes, t).is_unused(), given.is_none(), "t{t}");
    }
    assert_eq!(image::shape(&bytes, 6).bytes(), 16 * 256);
    assert_eq!(image::shape(&bytes, 6).to_string(), "16x256");
}

#[test]
fn an_all_unused_image_is_palette_and_start_row_only() {
    // What STTILECFG shows after palette 1 with every tile unused (docs/semantics.md L3).
    let bytes = image::encode(1, 0, &[None; TILE_SLOTS]);
    let mut expected = [0; SIZE];
    expected[0] = 1;
    assert_eq!(bytes, expected);
    // A `Some` of the unused shape writes the same zeros as `None`.
    let zero = image::encode(1, 0, &[Some(TileShape::new(0, 0)); TILE_SLOTS]);
    assert_eq!(zero, expected);
}

#[test]
fn encode_runs_in_constants() {
    const IMAGE: [u8; SIZE] = image::encode(1, 2, &[Some(TileShape::new(4, 8)); TILE_SLOTS]);
    const T5: TileShape = image::shape(&IMAGE, 5);
    assert_eq!(T5, TileShape::new(4, 8));
    assert_eq!(image::start_row(&IMAGE), 2);
}

fn shapes() -> impl Strategy<Value = [Option<TileShape>; TILE_SLOTS]> {
    let one = proptest::option::of(
        (any::<u8>(), any::<u16>()).prop_map(|(rows, colsb)| TileShape::new(rows, colsb)),
    );
    [
        one.clone(),
        one.clone(),
        one.clone(),
        one.clone(),
        one.clone(),
        one.clone(),
        one.clone(),
        one,
    ]
}

proptest! {
    #[test]
    fn encode_then_read_round_trips(palette in any::<u8>(), start_row in any::<u8>(), shapes in shapes()) {
        let bytes = image::encode(palette, start_row, &shapes);
        prop_assert_eq!(image::palette_id(&bytes), palette);
        prop_assert_eq!(image::start_row(&bytes), start_row);
        for (t, shape) in (0u8..).zip(&shapes) {
            prop_assert_eq!(image::shape(&bytes, t), shape.unwrap_or(TileShape::new(0, 0)));
        }
        // encode never writes a reserved byte.
        for range in image::RESERVED {
            for offset in range {
                prop_assert_eq!(bytes[offset], 0, "byte {}", offset);
            }
        }
    }

    #[test]
    fn read_then_encode_round_trips(mut bytes in any::<[u8; SIZE]>()) {
        // Any image with zero reserved bytes is rebuilt exactly from its fields.
        for range in image::RESERVED {
            for offset in range {
                bytes[offset] = 0;
            }
        }
        let shapes: [Option<TileShape>; TILE_SLOTS] =
            core::array::from_fn(|t| Some(image::shape(&bytes, t as u8)));
        let rebuilt = image::encode(image::palette_id(&bytes), image::start_row(&bytes), &shapes);
        prop_assert_eq!(rebuilt, bytes);
    }
}
