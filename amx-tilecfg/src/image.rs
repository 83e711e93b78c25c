//! The 64-byte memory image that LDTILECFG reads and STTILECFG writes.
//!
//! | Bytes   | Field                                   |
//! |---------|-----------------------------------------|
//! | 0       | palette_id                              |
//! | 1       | start_row                               |
//! | 2..=15  | reserved, must be 0                     |
//! | 16 + 2t | tile t colsb, u16 little-endian (t < 8) |
//! | 32..=47 | reserved, must be 0                     |
//! | 48 + t  | tile t rows, u8                         |
//! | 56..=63 | reserved, must be 0                     |

use crate::shape::TileShape;

/// Size of the image in bytes.
pub const SIZE: usize = 64;
/// Number of tile slots the image has room for.
pub const TILE_SLOTS: usize = 8;
/// Offset of the palette id.
pub const PALETTE_ID: usize = 0;
/// Offset of start_row.
pub const START_ROW: usize = 1;
/// Offset of tile 0's colsb; tile t's is at `COLSB + 2 * t`.
pub const COLSB: usize = 16;
/// Offset of tile 0's rows; tile t's is at `ROWS + t`.
pub const ROWS: usize = 48;

/// The byte ranges that are reserved whatever the palette.
pub const RESERVED: [core::ops::Range<usize>; 3] = [2..16, 32..48, 56..64];

/// Offset of tile `t`'s colsb word. Only `t < TILE_SLOTS` has one: for a larger `t` the result
/// lies in the reserved bytes or past the image, so a caller must not read it as a tile's field.
pub const fn colsb_offset(t: u8) -> usize {
    COLSB + 2 * t as usize
}

/// Offset of tile `t`'s rows byte. As for [`colsb_offset`], only `t < TILE_SLOTS` has one; a
/// larger `t` gives an offset in the reserved bytes or past the image.
pub const fn rows_offset(t: u8) -> usize {
    ROWS + t as usize
}

/// Builds an image. Tiles given as `None` are unused (all their bytes zero).
pub const fn encode(
    palette_id: u8,
    start_row: u8,
    shapes: &[Option<TileShape>; TILE_SLOTS],
) -> [u8; SIZE] {
    let mut out = [0u8; SIZE];
    out[PALETTE_ID] = palette_id;
    out[START_ROW] = start_row;
    let mut t = 0;
    while t < TILE_SLOTS {
        if let Some(shape) = shapes[t] {
            let colsb = shape.colsb.to_le_bytes();
            out[colsb_offset(t as u8)] = colsb[0];
            out[colsb_offset(t as u8) + 1] = colsb[1];
            out[rows_offset(t as u8)] = shape.rows;
        }
        t += 1;
    }
    out
}

/// The palette id (byte 0).
pub const fn palette_id(image: &[u8; SIZE]) -> u8 {
    image[PALETTE_ID]
}

/// The start_row (byte 1).
pub const fn start_row(image: &[u8; SIZE]) -> u8 {
    image[START_ROW]
}

/// Tile `t`'s colsb, as written (whatever the palette); 0 for `t >= 8`, which has no slot in
/// the image (its offset would fall in reserved bytes or past the end).
pub const fn colsb(image: &[u8; SIZE], t: u8) -> u16 {
    if t as usize >= TILE_SLOTS {
        return 0;
    }
    u16::from_le_bytes([image[colsb_offset(t)], image[colsb_offset(t) + 1]])
}

/// Tile `t`'s rows, as written (whatever the palette); 0 for `t >= 8`, as for [`colsb`].
pub const fn rows(image: &[u8; SIZE], t: u8) -> u8 {
    if t as usize >= TILE_SLOTS {
        return 0;
    }
    image[rows_offset(t)]
}

/// Tile `t`'s shape as written (`0x0` for an unused tile, and for `t >= 8`).
pub const fn shape(image: &[u8; SIZE], t: u8) -> TileShape {
    TileShape::new(rows(image, t), colsb(image, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_of_any_tile_number_lie_outside_the_tile_fields() {
        assert_eq!((colsb_offset(7), rows_offset(7)), (30, 55));
        for t in [8, 100, u8::MAX] {
            assert!(colsb_offset(t) >= 32 && rows_offset(t) >= 56, "t{t}");
        }
    }

    #[test]
    fn tiles_past_the_image_read_as_unused() {
        let image = [0xFF; SIZE];
        assert_eq!(shape(&image, 7), TileShape::new(0xFF, 0xFFFF));
        for t in [8, 16, 24, 100, u8::MAX] {
            assert_eq!(shape(&image, t), TileShape::new(0, 0), "t{t}");
            assert_eq!((rows(&image, t), colsb(&image, t)), (0, 0), "t{t}");
        }
    }
}
