//! Decoding CPUID leaves 0x1D (palettes) and 0x1E (TMUL limits), against the register values
//! and bit layouts of docs/semantics.md section 0.

use amx_tilecfg::image::{self, SIZE};
use amx_tilecfg::palette::MAX_PALETTES;
use amx_tilecfg::{validate, Palette, PaletteTable, Rule, TileShape, TmulLimits};

/// CPUID.(0x1D, 1) of a Sapphire/Granite Rapids core: EAX, EBX, ECX.
const LEAF_1D_1: (u32, u32, u32) = (0x0400_2000, 0x0008_0040, 0x0000_0010);
/// CPUID.(0x1E, 0).EBX of the same core.
const LEAF_1E_0_EBX: u32 = 0x0000_4010;

#[test]
fn palette_1_decodes_to_the_architectural_limits() {
    let (eax, ebx, ecx) = LEAF_1D_1;
    let p = Palette::from_cpuid(eax, ebx, ecx);
    assert_eq!(p.total_tile_bytes, 8192);
    assert_eq!(p.bytes_per_tile, 1024);
    assert_eq!(p.bytes_per_row, 64);
    assert_eq!(p.max_names, 8);
    assert_eq!(p.max_rows, 16);
    assert_eq!(p, Palette::PALETTE_1);
    assert_eq!(p.names(), 8);
}

#[test]
fn each_palette_field_comes_from_its_own_bits() {
    // A distinct value in every 16-bit half tells a swapped or shifted field apart.
    let p = Palette::from_cpuid(0x1234_5678, 0x9ABC_DEF0, 0x0000_0F1E);
    assert_eq!(
        p,
        Palette {
            total_tile_bytes: 0x5678,
            bytes_per_tile: 0x1234,
            bytes_per_row: 0xDEF0,
            max_names: 0x9ABC,
            max_rows: 0x0F1E,
        }
    );
    // ECX[31:16] is reserved and must not leak into max_rows.
    let (eax, ebx, _) = LEAF_1D_1;
    assert_eq!(
        Palette::from_cpuid(eax, ebx, 0xFFFF_0010),
        Palette::PALETTE_1
    );
    // A subleaf past max_palette reads all zero: a palette without tiles.
    let empty = Palette::from_cpuid(0, 0, 0);
    assert_eq!(
        (empty.names(), empty.bytes_per_row, empty.max_rows),
        (0, 0, 0)
    );
}

#[test]
fn names_are_capped_at_the_images_eight_slots() {
    for (max_names, names) in [
        (0, 0),
        (1, 1),
        (2, 2),
        (7, 7),
        (8, 8),
        (9, 8),
        (16, 8),
        (0xFFFF, 8),
    ] {
        let p = Palette {
            max_names,
            ..Palette::PALETTE_1
        };
        assert_eq!(p.names(), names, "max_names {max_names}");
    }
    assert_eq!(image::TILE_SLOTS, 8);
}

#[test]
fn tmul_limits_decode_from_leaf_1e() {
    let limits = TmulLimits::from_cpuid(LEAF_1E_0_EBX);
    assert_eq!((limits.maxk, limits.maxn), (16, 64));
    assert_eq!(limits, TmulLimits::ARCHITECTURAL);
    // EBX[7:0] is tmul_maxk and EBX[23:8] tmul_maxn; EBX[31:24] is reserved.
    assert_eq!(
        TmulLimits::from_cpuid(0x00AB_CD12),
        TmulLimits {
            maxk: 0x12,
            maxn: 0xABCD
        }
    );
    assert_eq!(
        TmulLimits::from_cpuid(0xFF00_4010),
        TmulLimits::ARCHITECTURAL
    );
    assert_eq!(TmulLimits::from_cpuid(0), TmulLimits { maxk: 0, maxn: 0 });
}

#[test]
fn the_architectural_table_holds_palette_1_only() {
    let t = PaletteTable::ARCHITECTURAL;
    assert_eq!(t.max_palette(), 1);
    assert_eq!(t.get(0), None, "palette 0 (INIT) has no limits");
    assert_eq!(t.get(1), Some(&Palette::PALETTE_1));
    for id in 2..=255 {
        assert_eq!(t.get(id), None, "palette {id}");
    }
    assert_eq!(t, PaletteTable::one(Palette::PALETTE_1));
    assert_eq!(t, PaletteTable::new(&[Palette::PALETTE_1]));
}

#[test]
fn the_empty_table_has_no_palette_besides_init() {
    let t = PaletteTable::NONE;
    assert_eq!(t.max_palette(), 0);
    for id in 0..=255 {
        assert_eq!(t.get(id), None, "palette {id}");
    }
    assert_eq!(PaletteTable::new(&[]), t);
}

/// Palette `id` of a made-up CPU, different in every field from its neighbours.
fn made_up(id: u16) -> Palette {
    Palette {
        total_tile_bytes: 1000 + id,
        bytes_per_tile: 100 + id,
        bytes_per_row: 4 * id,
        max_names: id,
        max_rows: 2 * id,
    }
}

#[test]
fn a_table_of_several_palettes_keeps_each_at_its_id() {
    let palettes: Vec<Palette> = (1..=3).map(made_up).collect();
    let t = PaletteTable::new(&palettes);
    assert_eq!(t.max_palette(), 3);
    assert_eq!(t.get(0), None);
    for id in 1..=3u8 {
        assert_eq!(t.get(id), Some(&made_up(id as u16)), "palette {id}");
    }
    assert_eq!(t.get(4), None);
}

#[test]
fn a_table_keeps_at_most_max_palettes() {
    let palettes: Vec<Palette> = (1..=10).map(made_up).collect();
    let t = PaletteTable::new(&palettes);
    assert_eq!(usize::from(t.max_palette()), MAX_PALETTES);
    assert_eq!(
        t.get(MAX_PALETTES as u8),
        Some(&made_up(MAX_PALETTES as u16))
    );
    assert_eq!(t.get(MAX_PALETTES as u8 + 1), None);
}

#[test]
fn a_table_decoded_from_leaf_1d_validates_like_the_architectural_one() {
    // What a caller does with the raw registers: subleaf 0 gives max_palette, subleaf p >= 1
    // gives palette p.
    let max_palette = 1u32; // CPUID.(0x1D, 0).EAX
    let (eax, ebx, ecx) = LEAF_1D_1;
    let palettes: Vec<Palette> = (1..=max_palette)
        .map(|_| Palette::from_cpuid(eax, ebx, ecx))
        .collect();
    let decoded = PaletteTable::new(&palettes);
    assert_eq!(decoded, PaletteTable::ARCHITECTURAL);
    let mut shapes = [None; 8];
    shapes[0] = Some(TileShape::new(16, 64));
    shapes[1] = Some(TileShape::new(17, 64));
    let bytes = image::encode(1, 0, &shapes);
    assert_eq!(
        validate(&bytes, &decoded),
        validate(&bytes, &PaletteTable::ARCHITECTURAL)
    );
    let mut p2 = [0u8; SIZE];
    p2[0] = 2;
    let report = validate(&p2, &decoded);
    assert_eq!(
        report.iter().next().map(|v| v.rule),
        Some(Rule::PaletteUnsupported)
    );
}

#[test]
fn a_second_palette_is_checked_against_its_own_limits() {
    let wide = Palette {
        bytes_per_row: 128,
        max_rows: 32,
        ..Palette::PALETTE_1
    };
    let table = PaletteTable::new(&[Palette::PALETTE_1, wide]);
    let mut shapes = [None; 8];
    shapes[0] = Some(TileShape::new(32, 128));
    assert!(validate(&image::encode(2, 0, &shapes), &table).is_empty());
    let report = validate(&image::encode(1, 0, &shapes), &table);
    let rules: Vec<(Rule, u32)> = report.iter().map(|v| (v.rule, v.limit)).collect();
    assert_eq!(rules, [(Rule::ColsbTooLarge, 64), (Rule::RowsTooLarge, 16)]);
}

#[test]
fn decoding_is_usable_in_constants() {
    const P: Palette = Palette::from_cpuid(0x0400_2000, 0x0008_0040, 0x10);
    const T: PaletteTable = PaletteTable::one(P);
    const L: TmulLimits = TmulLimits::from_cpuid(0x4010);
    const NAMES: usize = P.names();
    assert_eq!(
        (T, L, NAMES),
        (PaletteTable::ARCHITECTURAL, TmulLimits::ARCHITECTURAL, 8)
    );
}
