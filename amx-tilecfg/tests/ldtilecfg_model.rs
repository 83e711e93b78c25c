//! `validate` against a literal transcription of LDTILECFG (docs/semantics.md section 2) and of the
//! TILELOADD #UD conditions (section 6, T1), written here without using the crate's code.

use amx_tilecfg::{validate, Palette, PaletteTable, RuleKind};
use proptest::prelude::*;

/// One palette's limits, as CPUID leaf 0x1D reports them.
#[derive(Clone, Copy, Debug)]
struct Limits {
    bytes_per_row: u16,
    max_rows: u16,
    /// Only given to the crate: the pseudocode of section 2 has no max_names, so the model is
    /// only run on palettes with at least the image's 8 tile names.
    max_names: u16,
}

/// The CPU's palette table: `palettes[p - 1]` is palette p, for 1 <= p <= max_palette.
#[derive(Clone, Debug)]
struct Cpu {
    max_palette: u8,
    palettes: Vec<Limits>,
}

/// Section 2's pseudocode, line by line: does LDTILECFG raise #GP on `mem`? The tile state is
/// taken as enabled in XCR0.
fn ldtilecfg_raises_gp(mem: &[u8; 64], cpu: &Cpu) -> bool {
    let palette_id = mem[0];
    // "error if palette_id > max_palette or the palette is not supported by XCR0."
    let mut error = palette_id > cpu.max_palette;
    if !error && palette_id != 0 {
        // "start_row := byte1 (not validated)."
        let _start_row = mem[1];
        // "Reserved bytes 2..15, 32..47 and 56..63 must be zero."
        for i in (2..=15).chain(32..=47).chain(56..=63) {
            if mem[i] != 0 {
                error = true;
            }
        }
        let palette = cpu.palettes[usize::from(palette_id) - 1];
        for t in 0..8 {
            // "16+2t: tile t colsb, u16 little-endian"; "48+t: tile t rows, u8".
            let colsb = u16::from(mem[16 + 2 * t]) | (u16::from(mem[16 + 2 * t + 1]) << 8);
            let rows = mem[48 + t];
            // "Each colsb must be <= bytes_per_row and each rows <= max_rows."
            if colsb > palette.bytes_per_row || u16::from(rows) > palette.max_rows {
                error = true;
            }
            // "For each tile, rows==0 and colsb==0 together, or both nonzero; otherwise error."
            let both_zero = rows == 0 && colsb == 0;
            let both_nonzero = rows != 0 && colsb != 0;
            if !(both_zero || both_nonzero) {
                error = true;
            }
        }
    }
    // "If error: #GP."
    error
}

/// Section 6, T1, for a configuration that loaded with a palette other than 0: the tiles on
/// which TILELOADD raises #UD for a reason of the configuration. An unused tile is left out:
/// it raises #UD too, but that is not a violation of the image.
fn tileloadd_raises_ud(mem: &[u8; 64]) -> Vec<u8> {
    let start_row = mem[1];
    let mut tiles = Vec::new();
    for t in 0..8 {
        let colsb = u16::from(mem[16 + 2 * t]) | (u16::from(mem[16 + 2 * t + 1]) << 8);
        let rows = mem[48 + t];
        let unused = rows == 0 && colsb == 0;
        // "colsb % 4 != 0" and "start_row >= tile.rows".
        if !unused && (colsb % 4 != 0 || start_row >= rows) {
            tiles.push(t as u8);
        }
    }
    tiles
}

/// The crate's table for the model's CPU.
fn table_of(cpu: &Cpu) -> PaletteTable {
    let palettes: Vec<Palette> = cpu
        .palettes
        .iter()
        .map(|l| Palette {
            bytes_per_row: l.bytes_per_row,
            max_rows: l.max_rows,
            max_names: l.max_names,
            ..Palette::PALETTE_1
        })
        .collect();
    PaletteTable::new(&palettes)
}

/// The byte values where the rules have their edges.
const INTERESTING: [u8; 9] = [0, 1, 15, 16, 17, 63, 64, 65, 255];

/// A byte, mostly one of the interesting values.
fn byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => proptest::sample::select(&INTERESTING[..]),
        1 => any::<u8>(),
    ]
}

/// One tile slot of the starting image: (rows, colsb), unused or within palette 1's limits,
/// with colsb sometimes not a multiple of 4.
fn tile() -> impl Strategy<Value = (u8, u16)> {
    prop_oneof![
        3 => Just((0, 0)),
        4 => (1..=16u8, 1..=16u16).prop_map(|(rows, k)| (rows, 4 * k)),
        2 => (1..=16u8, 1..=64u16),
    ]
}

/// An offset to overwrite: any byte, with the palette id, start_row, the reserved bytes, the
/// colsb bytes and the rows bytes each likely.
fn offset() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        1 => Just(1usize),
        2 => prop_oneof![2..16usize, 32..48usize, 56..64usize],
        2 => (0..8usize).prop_map(|t| 16 + 2 * t),
        1 => (0..8usize).prop_map(|t| 17 + 2 * t),
        2 => 48..56usize,
        1 => 0..64usize,
    ]
}

/// A 64-byte image biased toward the edges of each rule: a configuration that palette 1 loads
/// (palette 0, 1 or another id; any start_row), then 0 to 3 of its bytes overwritten with one
/// of the interesting values. About two images in five load, palette 0 included.
fn image() -> impl Strategy<Value = [u8; 64]> {
    let palette = prop_oneof![
        2 => Just(0u8),
        8 => Just(1u8),
        1 => Just(2u8),
        1 => byte(),
    ];
    let start_row = prop_oneof![2 => Just(0u8), 1 => byte()];
    let changes = prop_oneof![
        3 => Just(Vec::new()),
        6 => proptest::collection::vec((offset(), byte()), 1..=3),
    ];
    (
        palette,
        start_row,
        proptest::collection::vec(tile(), 8),
        changes,
    )
        .prop_map(|(palette, start_row, tiles, changes)| {
            let mut mem = raw_image(palette, start_row, &tiles);
            for (offset, value) in changes {
                mem[offset] = value;
            }
            mem
        })
}

/// A limit, mostly one of the edge values.
fn limit() -> impl Strategy<Value = u16> {
    prop_oneof![
        4 => proptest::sample::select(&[0u16, 1, 15, 16, 17, 63, 64, 65, 255, 256, 0xFFFF][..]),
        1 => any::<u16>(),
    ]
}

/// The architectural CPU most of the time, else up to 3 palettes with any limits and at least
/// 8 names.
fn cpu() -> impl Strategy<Value = Cpu> {
    let arch = Cpu {
        max_palette: 1,
        palettes: vec![Limits {
            bytes_per_row: 64,
            max_rows: 16,
            max_names: 8,
        }],
    };
    let names = proptest::sample::select(&[8u16, 9, 16, 0xFFFF][..]);
    let other = proptest::collection::vec(
        (limit(), limit(), names).prop_map(|(bytes_per_row, max_rows, max_names)| Limits {
            bytes_per_row,
            max_rows,
            max_names,
        }),
        0..=3,
    )
    .prop_map(|palettes| Cpu {
        max_palette: palettes.len() as u8,
        palettes,
    });
    prop_oneof![2 => Just(arch), 1 => other]
}

proptest! {
    #[test]
    fn validate_loads_exactly_what_ldtilecfg_loads(mem in image(), cpu in cpu()) {
        let report = validate(&mem, &table_of(&cpu));
        prop_assert_eq!(
            report.is_loadable(),
            !ldtilecfg_raises_gp(&mem, &cpu),
            "image {:?}\nreport {:?}", mem, report.iter().collect::<Vec<_>>()
        );
        // Palette 0 ignores every other byte.
        if mem[0] == 0 {
            prop_assert!(report.is_empty());
        }
    }

    #[test]
    fn use_violations_name_the_tiles_tileloadd_rejects(mem in image(), cpu in cpu()) {
        let report = validate(&mem, &table_of(&cpu));
        // The use-time rules are about a configuration that loaded.
        if mem[0] == 0 || !report.is_loadable() {
            return Ok(());
        }
        let mut tiles: Vec<u8> = report
            .use_violations()
            .map(|v| v.tile.expect("a use-time violation names its tile"))
            .collect();
        tiles.dedup();
        prop_assert_eq!(tiles, tileloadd_raises_ud(&mem));
        prop_assert!(report.iter().all(|v| v.kind() == RuleKind::Use));
    }
}

/// The model itself, on the cases docs/semantics.md section 2 measured: a model that said "loads"
/// (or "faults") to everything would make the properties above pass vacuously.
#[test]
fn the_model_agrees_with_the_measured_cases() {
    let arch = Cpu {
        max_palette: 1,
        palettes: vec![Limits {
            bytes_per_row: 64,
            max_rows: 16,
            max_names: 8,
        }],
    };
    let table = table_of(&arch);
    let valid = raw_image(1, 0, &[(16, 64)]);
    let with = |changes: &[(usize, u8)]| {
        let mut mem = valid;
        for &(i, v) in changes {
            mem[i] = v;
        }
        mem
    };
    // L1: each of these raises #GP.
    let mut faulting = Vec::new();
    for i in (2..16).chain(56..64) {
        faulting.push(with(&[(i, 0x01)]));
    }
    for i in 32..48 {
        faulting.push(with(&[(i, 0x80)]));
    }
    for p in [2, 3, 128, 255] {
        faulting.push(with(&[(0, p)]));
    }
    faulting.push(with(&[(16, 65)]));
    faulting.push(with(&[(30, 65), (55, 1)])); // colsb 65 on tile 7
    faulting.push(with(&[(16, 0x00), (17, 0x01)])); // colsb 0x100
    faulting.push(with(&[(16, 0x40), (17, 0x01)])); // colsb 0x140
    faulting.push(with(&[(48, 17)]));
    faulting.push(with(&[(48, 255)]));
    faulting.push(with(&[(16, 0)])); // rows 16 with colsb 0
    faulting.push(with(&[(48, 0)])); // rows 0 with colsb 64
    for mem in &faulting {
        assert!(ldtilecfg_raises_gp(mem, &arch), "{mem:?}");
        assert!(!validate(mem, &table).is_loadable(), "{mem:?}");
    }
    // L3 and L4: each of these loads.
    let mut loading = vec![valid, with(&[(16, 0), (48, 0)])];
    for colsb in [1, 6, 63] {
        loading.push(with(&[(16, colsb)]));
    }
    for start_row in [0, 15, 16, 200, 255] {
        loading.push(with(&[(1, start_row)]));
    }
    let mut init = [0xFFu8; 64];
    init[0] = 0;
    loading.push(init);
    for mem in &loading {
        assert!(!ldtilecfg_raises_gp(mem, &arch), "{mem:?}");
        assert!(validate(mem, &table).is_loadable(), "{mem:?}");
    }
    // T1: colsb 6 and start_row >= rows raise #UD on TILELOADD.
    assert_eq!(tileloadd_raises_ud(&with(&[(16, 6)])), [0]);
    assert_eq!(tileloadd_raises_ud(&with(&[(1, 16)])), [0]);
    assert_eq!(tileloadd_raises_ud(&with(&[(1, 15)])), [] as [u8; 0]);
}

/// An image written byte by byte from the layout of semantics.md section 2 (palette_id at 0,
/// start_row at 1, tile t's colsb at 16 + 2t little-endian, its rows at 48 + t), not with
/// `amx_tilecfg::image`: the model is checked against an independent transcription.
fn raw_image(palette: u8, start_row: u8, tiles: &[(u8, u16)]) -> [u8; 64] {
    let mut mem = [0u8; 64];
    mem[0] = palette;
    mem[1] = start_row;
    for (t, &(rows, colsb)) in tiles.iter().enumerate() {
        mem[48 + t] = rows;
        mem[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
    }
    mem
}
