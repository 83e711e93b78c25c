//! Palette limits: what each palette id allows, from the architecture or from CPUID leaf 0x1D.

use crate::image::TILE_SLOTS;

/// The limits of one palette (CPUID leaf 0x1D, subleaf = palette id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
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

/// A table serializes as the list of its palettes `1..=max_palette` (palette 0 has no limits);
/// a list longer than [`MAX_PALETTES`] is a deserialize error rather than cut short.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for PaletteTable {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let count = self.max_palette as usize;
        let mut seq = serializer.serialize_seq(Some(count))?;
        for palette in &self.palettes[..count] {
            seq.serialize_element(palette)?;
        }
        seq.end()
    }
}

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for PaletteTable {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Palettes;

        impl<'de> serde::de::Visitor<'de> for Palettes {
            type Value = PaletteTable;

            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(
                    f,
                    "a list of at most {MAX_PALETTES} palettes (palette 1 first)"
                )
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<PaletteTable, A::Error> {
                let mut table = PaletteTable::NONE;
                while let Some(palette) = seq.next_element::<Palette>()? {
                    let Some(slot) = table.palettes.get_mut(table.max_palette as usize) else {
                        return Err(serde::de::Error::invalid_length(MAX_PALETTES + 1, &self));
                    };
                    *slot = palette;
                    table.max_palette += 1;
                }
                Ok(table)
            }
        }

        deserializer.deserialize_seq(Palettes)
    }
}

#[cfg(all(test, feature = "serde"))]
mod serde_tests {
    extern crate std;

    use super::*;
    use crate::{ElemType, Rule, TileShape, TmulLimits, Violation};
    use std::string::ToString;

    #[test]
    fn tables_round_trip_as_their_palettes() {
        let small = Palette {
            max_rows: 8,
            ..Palette::PALETTE_1
        };
        for table in [
            PaletteTable::NONE,
            PaletteTable::ARCHITECTURAL,
            PaletteTable::new(&[Palette::PALETTE_1, small]),
            PaletteTable::new(&[small; MAX_PALETTES]),
        ] {
            let json = serde_json::to_string(&table).unwrap();
            assert_eq!(serde_json::from_str::<PaletteTable>(&json).unwrap(), table);
        }
        assert_eq!(
            serde_json::to_string(&PaletteTable::ARCHITECTURAL).unwrap(),
            r#"[{"total_tile_bytes":8192,"bytes_per_tile":1024,"bytes_per_row":64,"max_names":8,"max_rows":16}]"#
        );
    }

    #[test]
    fn a_table_of_more_palettes_than_fit_is_refused() {
        let eight: std::vec::Vec<Palette> = std::vec![Palette::PALETTE_1; MAX_PALETTES + 1];
        let json = serde_json::to_string(&eight).unwrap();
        let err = serde_json::from_str::<PaletteTable>(&json).unwrap_err();
        assert!(err.to_string().contains("at most 7 palettes"), "{err}");
    }

    #[test]
    fn plain_data_round_trips() {
        let limits = TmulLimits { maxk: 8, maxn: 32 };
        let json = serde_json::to_string(&limits).unwrap();
        assert_eq!(serde_json::from_str::<TmulLimits>(&json).unwrap(), limits);
        let shape = TileShape::new(16, 64);
        let json = serde_json::to_string(&shape).unwrap();
        assert_eq!(json, r#"{"rows":16,"colsb":64}"#);
        assert_eq!(serde_json::from_str::<TileShape>(&json).unwrap(), shape);
        assert_eq!(serde_json::to_string(&ElemType::Bf16).unwrap(), r#""bf16""#);
        assert_eq!(
            serde_json::from_str::<ElemType>(r#""i32""#).unwrap(),
            ElemType::I32
        );
        let v = Violation {
            rule: Rule::RowsTooLarge,
            tile: Some(3),
            offset: 51,
            value: 17,
            limit: 16,
            palette: 1,
        };
        let json = serde_json::to_string(&v).unwrap();
        assert_eq!(serde_json::from_str::<Violation>(&json).unwrap(), v);
    }
}
