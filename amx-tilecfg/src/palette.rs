//! Palette limits: what each palette id allows, from the architecture or from CPUID leaf 0x1D.

use crate::image::TILE_SLOTS;

/// The limits of one palette (CPUID leaf 0x1D, subleaf = palette id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Palette {
    /// Total bytes of tile storage (EAX\[15:0\]).
    pub total_tile_bytes: u16,
    /// Bytes of storage per tile (EAX\[31:16\]).
    pub bytes_per_tile: u16,
    /// Largest colsb a tile may have (EBX\[15:0\]).
    pub bytes_per_row: u16,
    /// Number of tile names (EBX\[31:16\]); at most 8 fit in the image.
    pub max_names: u16,
    /// Largest rows a tile may have (ECX\[15:0\]).
    pub max_rows: u16,
}

impl Palette {
    /// Palette 1 as the architecture defines it: 8 tiles of 16 rows x 64 bytes.
    pub const PALETTE_1: Palette = Palette {
        total_tile_bytes: 8192,
        bytes_per_tile: 1024,
        bytes_per_row: 64,
        max_names: 8,
        max_rows: 16,
    };

    /// Decodes CPUID.(EAX=0x1D, ECX=palette id) for a palette id >= 1.
    pub const fn from_cpuid(eax: u32, ebx: u32, ecx: u32) -> Palette {
        Palette {
            total_tile_bytes: eax as u16,
            bytes_per_tile: (eax >> 16) as u16,
            bytes_per_row: ebx as u16,
            max_names: (ebx >> 16) as u16,
            max_rows: ecx as u16,
        }
    }

    /// The number of tile slots of the image this palette uses (`max_names`, capped at 8).
    pub const fn names(&self) -> usize {
        if (self.max_names as usize) < TILE_SLOTS {
            self.max_names as usize
        } else {
            TILE_SLOTS
        }
    }
}

/// Most palette ids (besides 0) a [`PaletteTable`] can describe.
pub const MAX_PALETTES: usize = 7;

/// The palettes a CPU supports: ids `1..=max_palette`, each with its limits. Palette 0 (INIT)
/// is always supported and has no limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PaletteTable {
    max_palette: u8,
    palettes: [Palette; MAX_PALETTES],
}

const EMPTY: Palette = Palette {
    total_tile_bytes: 0,
    bytes_per_tile: 0,
    bytes_per_row: 0,
    max_names: 0,
    max_rows: 0,
};

impl PaletteTable {
    /// The architectural table: palette 1 only, 8 tiles of 16 rows x 64 bytes. This is what the
    /// `tilecfg!` macro checks against, and what every AMX CPU to date reports.
    pub const ARCHITECTURAL: PaletteTable = PaletteTable::one(Palette::PALETTE_1);

    /// A table with no palette besides INIT (a CPU or VM that reports max_palette = 0).
    pub const NONE: PaletteTable = PaletteTable {
        max_palette: 0,
        palettes: [EMPTY; MAX_PALETTES],
    };

    /// A table whose only non-INIT palette is palette 1 with the given limits.
    pub const fn one(palette1: Palette) -> PaletteTable {
        let mut palettes = [EMPTY; MAX_PALETTES];
        palettes[0] = palette1;
        PaletteTable {
            max_palette: 1,
            palettes,
        }
    }

    /// A table of palettes `1..=palettes.len()`; entries past [`MAX_PALETTES`] are dropped.
    pub fn new(palettes: &[Palette]) -> PaletteTable {
        let mut table = PaletteTable::NONE;
        for (slot, p) in table.palettes.iter_mut().zip(palettes) {
            *slot = *p;
        }
        table.max_palette = palettes.len().min(MAX_PALETTES) as u8;
        table
    }

    /// The highest palette id supported (CPUID.(0x1D,0).EAX).
    pub const fn max_palette(&self) -> u8 {
        self.max_palette
    }

    /// The limits of palette `id`, for `1 <= id <= max_palette`.
    pub const fn get(&self, id: u8) -> Option<&Palette> {
        if id == 0 || id > self.max_palette {
            None
        } else {
            Some(&self.palettes[id as usize - 1])
        }
    }
}
