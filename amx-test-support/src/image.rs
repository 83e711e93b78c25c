//! Raw 64-byte tile-configuration images, valid or not, for tests that hand LDTILECFG bytes.
//!
//! The layout (docs/semantics.md section 2): byte 0 palette_id, byte 1 start_row, tile t's colsb
//! as a little-endian u16 at 16 + 2t, its rows at 48 + t, every other byte reserved. Written out
//! here without `amx_tilecfg::image`, so that the tests of the rules crate can use it as an
//! independent oracle. Every method is `const`, so an image can be a `static` (an operand of
//! `ldtilecfg [rip + sym]`):
//!
//! ```
//! use amx_test_support::TileImage;
//!
//! static ALL_16X64: [u8; 64] = TileImage::palette(1).all_tiles(16, 64).bytes();
//! assert_eq!((ALL_16X64[0], ALL_16X64[16 + 2 * 7], ALL_16X64[48 + 7]), (1, 64, 16));
//!
//! let edge = TileImage::palette(1).start_row(2).tile(0, 7, 48).tile(5, 16, 64).bytes();
//! assert_eq!((edge[1], edge[16], edge[48], edge[53]), (2, 48, 7, 16));
//! ```

/// A tile-configuration image under construction (see the [module](self) documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "an image does nothing until its `bytes` are used"]
pub struct TileImage([u8; 64]);

/// Tile slots with a colsb and a rows byte inside the image: t0..t7 are the architectural
/// tiles; t8..t15 land on reserved bytes (32..47 and 56..63), as a palette with more tile
/// names would lay them out.
pub const SLOTS: u8 = 16;

impl TileImage {
    /// All zero but the palette_id (palette 0 alone: the INIT image).
    pub const fn palette(palette: u8) -> TileImage {
        let mut bytes = [0u8; 64];
        bytes[0] = palette;
        TileImage(bytes)
    }

    /// Sets start_row (byte 1).
    pub const fn start_row(mut self, row: u8) -> TileImage {
        self.0[1] = row;
        self
    }

    /// Sets tile `t`'s rows and colsb (bytes per row).
    ///
    /// # Panics
    ///
    /// When `t` is [`SLOTS`] or more: no image byte holds that tile.
    pub const fn tile(self, t: u8, rows: u8, colsb: u16) -> TileImage {
        self.rows(t, rows).colsb(t, colsb)
    }

    /// Sets tile `t`'s rows alone.
    ///
    /// # Panics
    ///
    /// When `t` is [`SLOTS`] or more.
    pub const fn rows(mut self, t: u8, rows: u8) -> TileImage {
        assert!(t < SLOTS, "tile slots t0..t15 have bytes in the image");
        self.0[48 + t as usize] = rows;
        self
    }

    /// Sets tile `t`'s colsb alone.
    ///
    /// # Panics
    ///
    /// When `t` is [`SLOTS`] or more.
    pub const fn colsb(mut self, t: u8, colsb: u16) -> TileImage {
        assert!(t < SLOTS, "tile slots t0..t15 have bytes in the image");
        let colsb = colsb.to_le_bytes();
        self.0[16 + 2 * t as usize] = colsb[0];
        self.0[17 + 2 * t as usize] = colsb[1];
        self
    }

    /// Sets every architectural tile (t0..t7) to `rows` x `colsb`.
    pub const fn all_tiles(mut self, rows: u8, colsb: u16) -> TileImage {
        let mut t = 0;
        while t < 8 {
            self = self.tile(t, rows, colsb);
            t += 1;
        }
        self
    }

    /// Sets byte `at` to `value` (a reserved byte, or a field's byte past the builder's reach).
    ///
    /// # Panics
    ///
    /// When `at` is 64 or more.
    pub const fn byte(mut self, at: usize, value: u8) -> TileImage {
        self.0[at] = value;
        self
    }

    /// The 64 bytes.
    pub const fn bytes(self) -> [u8; 64] {
        self.0
    }
}

/// A palette-`palette` image with `start_row` and the given `(tile, rows, colsb)`.
///
/// # Panics
///
/// When a tile is [`SLOTS`] or more.
pub const fn image(palette: u8, start_row: u8, tiles: &[(u8, u8, u16)]) -> [u8; 64] {
    let mut image = TileImage::palette(palette).start_row(start_row);
    let mut i = 0;
    while i < tiles.len() {
        let (t, rows, colsb) = tiles[i];
        image = image.tile(t, rows, colsb);
        i += 1;
    }
    image.bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_land_on_their_bytes() {
        let bytes = TileImage::palette(1)
            .start_row(3)
            .tile(2, 5, 0x1234)
            .tile(15, 9, 0xABCD)
            .byte(40, 7)
            .bytes();
        let mut expected = [0u8; 64];
        expected[0] = 1;
        expected[1] = 3;
        (expected[20], expected[21], expected[50]) = (0x34, 0x12, 5);
        (expected[46], expected[47], expected[63]) = (0xCD, 0xAB, 9);
        expected[40] = 7;
        assert_eq!(bytes, expected);
        let parts = TileImage::palette(1).rows(2, 5).colsb(2, 0x1234).bytes();
        assert_eq!(parts, TileImage::palette(1).tile(2, 5, 0x1234).bytes());
        assert_eq!(TileImage::palette(1).colsb(3, 64).bytes()[48 + 3], 0);
    }

    #[test]
    fn the_list_form_equals_the_builder() {
        assert_eq!(
            image(1, 0, &[(0, 16, 64), (4, 8, 32)]),
            TileImage::palette(1).tile(0, 16, 64).tile(4, 8, 32).bytes()
        );
        assert_eq!(image(0, 0, &[]), [0; 64]);
        let all = TileImage::palette(1).all_tiles(16, 64).bytes();
        assert!((0..8).all(|t| all[16 + 2 * t] == 64 && all[17 + 2 * t] == 0 && all[48 + t] == 16));
        assert!(all[32..48].iter().chain(&all[56..]).all(|&b| b == 0));
    }

    #[test]
    #[should_panic(expected = "tile slots t0..t15")]
    fn a_tile_past_the_image_panics() {
        let _ = TileImage::palette(1).tile(16, 1, 4);
    }
}
