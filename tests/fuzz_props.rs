//! Property tests (proptest) of the configuration rules and the emulator.
//!
//! - **Images**: `amx_runtime::rules::validate` and `TileConfig::from_bytes` never panic on any
//!   64 bytes and agree with each other, with LDTILECFG on the [`Emulator`], and with the load
//!   rules of docs/semantics.md section 2 written out independently below; for other palette tables
//!   too.
//! - **Instruction sequences**: random sequences on the [`Emulator`] (every instruction, tile
//!   numbers 0..12, strides 0..200, random memory of random length, random configurations
//!   including invalid ones, `set_start_row`, `set_tile_bytes`) never panic, and after every step:
//!   - the configuration STTILECFG shows passes the load rules (and is all zero when
//!     unconfigured);
//!   - an instruction that returns `Err` leaves the configuration, all 8 KiB of tile data and
//!     the destination memory exactly as they were (docs/semantics.md L2: a faulting LDTILECFG keeps
//!     the previous state; the same holds for every fault, since both backends check before
//!     they execute);
//!   - an instruction that returns `Ok` did exactly what docs/semantics.md says (L5 zeroing, T3/T4
//!     load rows, W2/W3 stored bytes, D4 zeroed C, start_row cleared, other tiles untouched),
//!     and the integer dot products equal a plain-Rust reference (section 9).
//!
//! The default case counts keep this file to a few seconds. Set `PROPTEST_CASES=N` to run N
//! cases of every property (e.g. `PROPTEST_CASES=100000` for a long run).

use amx_runtime::rules::{image, validate, Palette, PaletteTable};
use amx_runtime::{Emulator, Fault, TileConfig, TileShape, TileUnit};
use proptest::prelude::*;

/// `default` cases per property unless `PROPTEST_CASES` is set.
fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        // Sequences shrink to a handful of steps long before this.
        max_shrink_iters: 4096,
        ..amx_test_support::proptest_config(default)
    }
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

/// Any 64 bytes.
fn any_image() -> impl Strategy<Value = [u8; 64]> {
    prop::collection::vec(any::<u8>(), 64).prop_map(|v| {
        let mut out = [0u8; 64];
        out.copy_from_slice(&v);
        out
    })
}

/// A tile shape near the limits: unused, valid, one past a limit, colsb not a multiple of 4,
/// rows without colsb and the reverse, a colsb with only the high byte set.
fn edgy_shape() -> impl Strategy<Value = Option<TileShape>> {
    let rows = prop_oneof![4 => 1..=16u8, 1 => Just(0u8), 1 => 17..=18u8, 1 => any::<u8>()];
    let colsb = prop_oneof![
        4 => (1..=16u16).prop_map(|k| 4 * k),
        2 => 1..=66u16,
        1 => Just(0u16),
        1 => prop_oneof![Just(0x100u16), Just(0x140), Just(0xFFFF), any::<u16>()],
    ];
    prop_oneof![1 => Just(None), 4 => (rows, colsb).prop_map(|(r, c)| Some(TileShape::new(r, c)))]
}

/// An image built field by field, mostly palette 1 with zero reserved bytes, then 0 to 2 random
/// byte changes: valid and invalid images in useful proportions.
fn structured_image() -> impl Strategy<Value = [u8; 64]> {
    let palette = prop_oneof![8 => Just(1u8), 1 => Just(0u8), 1 => any::<u8>()];
    let start_row = prop_oneof![4 => Just(0u8), 2 => 0..20u8, 1 => any::<u8>()];
    let shapes = prop::array::uniform8(edgy_shape());
    let edits = prop::collection::vec((0..64usize, any::<u8>()), 0..=2);
    (
        palette,
        start_row,
        shapes,
        prop_oneof![3 => Just(vec![]), 1 => edits],
    )
        .prop_map(|(p, s, shapes, edits)| {
            let mut img = image::encode(p, s, &shapes);
            for (at, v) in edits {
                img[at] = v;
            }
            img
        })
}

/// A valid palette-1 image whose tiles fit a dot product: t0 and t1 are C (M x 4N), t2 and t3
/// are A (M x 4K), t4 and t5 are B (K x 4N), t6 and t7 anything valid or unused.
fn gemm_image() -> impl Strategy<Value = [u8; 64]> {
    let extra = prop_oneof![
        Just(None),
        (1..=16u8, 1..=16u16).prop_map(|(r, k)| Some(TileShape::new(r, 4 * k))),
    ];
    (1..=16u8, 1..=16u16, 1..=16u16, 0..4u8, extra.clone(), extra).prop_map(
        |(m, n, k, start_row, e6, e7)| {
            let c = Some(TileShape::new(m, 4 * n));
            let a = Some(TileShape::new(m, 4 * k));
            let b = Some(TileShape::new(k as u8, 4 * n));
            image::encode(1, start_row, &[c, c, a, a, b, b, e6, e7])
        },
    )
}

/// Images of every kind: uniform bytes (almost all invalid), field-built, dot-product shaped.
fn any_kind_of_image() -> impl Strategy<Value = [u8; 64]> {
    prop_oneof![1 => any_image(), 3 => structured_image(), 3 => gemm_image()]
}

/// A palette table as a CPU or VM may report it: none, the architectural one, a smaller
/// palette 1, or several palettes.
fn palette_table() -> impl Strategy<Value = PaletteTable> {
    let palette = (0..=16u16, 0..=64u16, 0..=8u16).prop_map(|(rows, row_bytes, names)| Palette {
        max_rows: rows,
        bytes_per_row: row_bytes,
        max_names: names,
        bytes_per_tile: rows * row_bytes,
        total_tile_bytes: rows * row_bytes * names,
    });
    prop_oneof![
        1 => Just(PaletteTable::NONE),
        2 => Just(PaletteTable::ARCHITECTURAL),
        3 => palette.clone().prop_map(PaletteTable::one),
        1 => prop::collection::vec(palette, 1..=3).prop_map(|v| PaletteTable::new(&v)),
    ]
}

/// docs/semantics.md section 2, written out without the crate's rule code: LDTILECFG accepts the
/// image on the architectural palette table (palette 1: 8 tiles, 16 rows, 64 bytes per row).
fn spec_loadable(img: &[u8; 64]) -> bool {
    if img[0] == 0 {
        return true; // L4: palette 0 ignores every other byte
    }
    if img[0] > 1 {
        return false; // palette_id > max_palette
    }
    let reserved_zero = img[2..16]
        .iter()
        .chain(&img[32..48])
        .chain(&img[56..64])
        .all(|&b| b == 0);
    let tiles_ok = (0..8).all(|t| {
        let colsb = u16::from_le_bytes([img[16 + 2 * t], img[17 + 2 * t]]);
        let rows = img[48 + t];
        colsb <= 64 && rows <= 16 && ((rows == 0) == (colsb == 0))
    });
    reserved_zero && tiles_ok
}

// ---------------------------------------------------------------------------------------------
// (a) The image validator
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(4096))]

    /// `validate`, `TileConfig::from_bytes`, the emulator's LDTILECFG and the written-out rules
    /// agree on every image, and every report can be printed.
    #[test]
    fn validate_and_from_bytes_agree(img in any_kind_of_image()) {
        let report = validate(&img, &PaletteTable::ARCHITECTURAL);
        let parsed = TileConfig::from_bytes(&img);
        let load: Vec<_> = report.load_violations().copied().collect();
        let uses: Vec<_> = report.use_violations().copied().collect();

        prop_assert_eq!(report.is_loadable(), load.is_empty());
        prop_assert_eq!(report.len(), load.len() + uses.len());
        prop_assert_eq!(parsed.is_ok(), report.is_loadable());
        prop_assert_eq!(report.is_loadable(), spec_loadable(&img), "the spec disagrees: {:02x?}", img);
        if img[0] == 0 {
            prop_assert!(report.is_empty(), "palette 0 ignores every other byte (L4)");
        }
        match &parsed {
            Ok(cfg) => {
                // Palette 0 is INIT whatever the other bytes hold (L4), kept canonical.
                let expected = if img[0] == 0 { [0; 64] } else { img };
                prop_assert_eq!(cfg.as_bytes(), &expected);
                prop_assert_eq!(cfg.use_violations(), uses);
                prop_assert!(cfg.check_against(&PaletteTable::ARCHITECTURAL).is_ok());
                prop_assert!(!cfg.to_string().is_empty());
            }
            Err(e) => {
                prop_assert_eq!(e.violations(), &load[..]);
                prop_assert!(e.missing_tiles().is_empty());
                prop_assert_eq!(e.to_string().lines().count(), load.len(), "{}", e);
            }
        }
        for v in report.iter() {
            prop_assert!(!v.to_string().is_empty());
        }

        // LDTILECFG on the emulator: accepted exactly when loadable, #GP otherwise.
        let mut emu = Emulator::new();
        match emu.ldtilecfg(&img) {
            Ok(()) => prop_assert!(report.is_loadable()),
            Err(Fault::GeneralProtection(why)) => {
                prop_assert!(!report.is_loadable());
                prop_assert!(!why.violations().is_empty());
            }
            Err(other) => prop_assert!(false, "LDTILECFG raised {other:?}, not #GP"),
        }
    }

    /// Against any palette table, `from_bytes_for`, `validate` and an emulator of that table
    /// still agree, and nothing panics.
    #[test]
    fn other_palette_tables_agree(img in any_kind_of_image(), table in palette_table()) {
        let report = validate(&img, &table);
        let parsed = TileConfig::from_bytes_for(&img, &table);
        prop_assert_eq!(parsed.is_ok(), report.is_loadable());
        if let Ok(cfg) = TileConfig::from_bytes(&img) {
            prop_assert_eq!(cfg.check_against(&table).is_ok(), report.is_loadable());
        }
        let mut emu = Emulator::with_limits(table, amx_runtime::TmulLimits::ARCHITECTURAL).unwrap();
        prop_assert_eq!(emu.ldtilecfg(&img).is_ok(), img[0] == 0 || report.is_loadable());
        for v in report.iter() {
            prop_assert!(!v.to_string().is_empty());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (b) Instruction sequences on the emulator
// ---------------------------------------------------------------------------------------------

/// Bytes of memory a load or store may be given: more than 15 rows at the largest stride.
const MEM_MAX: usize = 16 * 200 + 64;

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Op {
    Ldtilecfg([u8; 64]),
    Sttilecfg,
    Tilerelease,
    Tilezero(u8),
    /// TILELOADD (or TILELOADDT1) from `len` bytes filled from `seed`; through the raw-pointer
    /// method when `ptr` (then the buffer is at least `MEM_MAX` bytes, so every row is inside).
    Load {
        t: u8,
        stride: usize,
        len: usize,
        seed: u64,
        t1: bool,
        ptr: bool,
    },
    /// TILESTORED into `len` bytes of 0xA5 (at least `MEM_MAX` when `ptr`).
    Store {
        t: u8,
        stride: usize,
        len: usize,
        ptr: bool,
    },
    /// 0 TDPBSSD, 1 TDPBSUD, 2 TDPBUSD, 3 TDPBUUD, 4 TDPBF16PS, 5 TDPFP16PS.
    Dot {
        kind: u8,
        c: u8,
        a: u8,
        b: u8,
    },
    SetStartRow(u8),
    SetTile {
        t: u8,
        seed: u64,
    },
    TileData(u8),
}

/// A tile number, valid or not (0..12).
fn tile() -> impl Strategy<Value = u8> {
    0..12u8
}

fn op() -> impl Strategy<Value = Op> {
    let load = (
        tile(),
        0..200usize,
        0..=MEM_MAX,
        any::<u64>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(t, stride, len, seed, t1, ptr)| Op::Load {
            t,
            stride,
            len,
            seed,
            t1,
            ptr,
        });
    let store =
        (tile(), 0..200usize, 0..=MEM_MAX, any::<bool>()).prop_map(|(t, stride, len, ptr)| {
            Op::Store {
                t,
                stride,
                len,
                ptr,
            }
        });
    // Operands that fit `gemm_image` half the time, anything otherwise.
    let operands = prop_oneof![(0..2u8, 2..4u8, 4..6u8), (tile(), tile(), tile())];
    let dot = (0..6u8, operands).prop_map(|(kind, (c, a, b))| Op::Dot { kind, c, a, b });
    prop_oneof![
        3 => any_kind_of_image().prop_map(Op::Ldtilecfg),
        1 => Just(Op::Sttilecfg),
        1 => Just(Op::Tilerelease),
        2 => tile().prop_map(Op::Tilezero),
        5 => load,
        3 => store,
        6 => dot,
        2 => prop_oneof![0..4u8, any::<u8>()].prop_map(Op::SetStartRow),
        1 => (tile(), any::<u64>()).prop_map(|(t, seed)| Op::SetTile { t, seed }),
        1 => tile().prop_map(Op::TileData),
    ]
}

/// Random bytes from a seed: test memory without making proptest shrink kilobytes.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    amx_test_support::SplitMix64::new(seed).bytes(len)
}

/// Everything an instruction may change: the configuration and the eight tiles.
#[derive(Clone, PartialEq, Eq)]
struct State {
    config: [u8; 64],
    tiles: [[u8; 1024]; 8],
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "State {{ config: {:02x?}, tiles: .. }}", self.config)
    }
}

fn state(emu: &mut Emulator) -> State {
    State {
        config: emu.sttilecfg(),
        tiles: std::array::from_fn(|t| *emu.tile_bytes(t as u8).expect("tiles 0..8 exist")),
    }
}

/// `config` with start_row cleared, as every completed tile-data instruction leaves it.
fn start_row_cleared(mut config: [u8; 64]) -> [u8; 64] {
    config[image::START_ROW] = 0;
    config
}

/// docs/semantics.md section 9: the integer dot product of the tiles in `s`, C += A x B, wrapping.
fn int8_reference(s: &State, kind: u8, (c, a, b): (u8, u8, u8)) -> [u8; 1024] {
    let shape = |t: u8| image::shape(&s.config, t);
    let (m_rows, n, k) = (
        shape(c).rows as usize,
        shape(c).colsb as usize / 4,
        shape(a).colsb as usize / 4,
    );
    let (a_signed, b_signed) = match kind {
        0 => (true, true),
        1 => (true, false),
        2 => (false, true),
        _ => (false, false),
    };
    let ext = |x: u8, signed: bool| {
        if signed {
            i32::from(x as i8)
        } else {
            i32::from(x)
        }
    };
    let (ct, at, bt) = (
        &s.tiles[c as usize],
        &s.tiles[a as usize],
        &s.tiles[b as usize],
    );
    let mut out = [0u8; 1024];
    for m in 0..m_rows {
        for j in 0..n {
            let at_c = m * 64 + 4 * j;
            let mut acc = i32::from_le_bytes(ct[at_c..at_c + 4].try_into().unwrap());
            for kk in 0..k {
                for i in 0..4 {
                    let x = ext(at[m * 64 + 4 * kk + i], a_signed);
                    let y = ext(bt[kk * 64 + 4 * j + i], b_signed);
                    acc = acc.wrapping_add(x.wrapping_mul(y));
                }
            }
            out[at_c..at_c + 4].copy_from_slice(&acc.to_le_bytes());
        }
    }
    out
}

/// Runs one step and checks it against the state before. Returns whether it faulted.
fn step(emu: &mut Emulator, op: &Op) -> Result<bool, TestCaseError> {
    let before = state(emu);
    let mut memory_before = Vec::new();
    let mut memory_after = Vec::new();
    let result: Result<(), Fault> = match op {
        Op::Ldtilecfg(img) => emu.ldtilecfg(img),
        Op::Sttilecfg => {
            let shown = emu.sttilecfg();
            prop_assert_eq!(shown, before.config);
            Ok(())
        }
        Op::Tilerelease => {
            emu.tilerelease();
            Ok(())
        }
        Op::Tilezero(t) => emu.tilezero(*t),
        &Op::Load {
            t,
            stride,
            len,
            seed,
            t1,
            ptr,
        } => {
            let mem = bytes(seed, if ptr { len.max(MEM_MAX) } else { len });
            let r = match (ptr, t1) {
                (false, false) => emu.tileloadd(t, &mem, stride),
                (false, true) => emu.tileloaddt1(t, &mem, stride),
                // SAFETY: `mem` is at least MEM_MAX bytes, and any tile touches at most rows
                // 0..16 at a stride below 200, each at most 64 bytes: the last byte read is below
                // 15 * 199 + 64 < MEM_MAX.
                (true, false) => unsafe { emu.tileloadd_ptr(t, mem.as_ptr(), stride as isize) },
                // SAFETY: as above.
                (true, true) => unsafe { emu.tileloaddt1_ptr(t, mem.as_ptr(), stride as isize) },
            };
            memory_before = mem;
            r
        }
        &Op::Store {
            t,
            stride,
            len,
            ptr,
        } => {
            let mut mem = vec![0xA5u8; if ptr { len.max(MEM_MAX) } else { len }];
            memory_before = mem.clone();
            let r = if ptr {
                // SAFETY: `mem` is at least MEM_MAX bytes, owned here and not otherwise borrowed;
                // every row written ends below 15 * 199 + 64 < MEM_MAX.
                unsafe { emu.tilestored_ptr(t, mem.as_mut_ptr(), stride as isize) }
            } else {
                emu.tilestored(t, &mut mem, stride)
            };
            memory_after = mem;
            r
        }
        &Op::Dot { kind, c, a, b } => match kind {
            0 => emu.tdpbssd(c, a, b),
            1 => emu.tdpbsud(c, a, b),
            2 => emu.tdpbusd(c, a, b),
            3 => emu.tdpbuud(c, a, b),
            4 => emu.tdpbf16ps(c, a, b),
            _ => emu.tdpfp16ps(c, a, b),
        },
        &Op::SetStartRow(row) => {
            emu.set_start_row(row);
            Ok(())
        }
        &Op::SetTile { t, seed } => {
            let data: [u8; 1024] = bytes(seed, 1024).try_into().unwrap();
            emu.set_tile_bytes(t, &data);
            let mut expected = before.clone();
            if let Some(tile) = expected.tiles.get_mut(t as usize) {
                *tile = data;
            }
            prop_assert_eq!(&state(emu), &expected, "set_tile_bytes({})", t);
            Ok(())
        }
        &Op::TileData(t) => {
            let r = emu.tile_data(t);
            match &r {
                Ok(data) => prop_assert_eq!(data, &before.tiles[t as usize]),
                Err(_) => prop_assert!(t >= 8, "tile_data({}) failed", t),
            }
            r.map(drop)
        }
    };
    let after = state(emu);

    // Invariants of every state.
    prop_assert_eq!(after.config, emu.loaded_config());
    let report = validate(&after.config, &PaletteTable::ARCHITECTURAL);
    prop_assert!(
        report.is_loadable(),
        "STTILECFG shows an image LDTILECFG rejects: {:02x?}",
        after.config
    );
    prop_assert_eq!(emu.is_configured(), after.config[0] != 0);
    if after.config[0] == 0 {
        prop_assert_eq!(
            after.config,
            [0u8; 64],
            "unconfigured, yet STTILECFG is not all zero"
        );
    }

    if let Err(fault) = &result {
        // The rule: a fault changes nothing (L2 for LDTILECFG; the same for every instruction).
        prop_assert_eq!(
            &after,
            &before,
            "{:?} faulted ({}) but changed the state",
            op,
            fault
        );
        if matches!(op, Op::Store { .. }) {
            prop_assert_eq!(
                &memory_after,
                &memory_before,
                "{:?} faulted but wrote memory",
                op
            );
        }
        let is_gp = matches!(fault, Fault::GeneralProtection(_));
        prop_assert_eq!(
            is_gp,
            matches!(op, Op::Ldtilecfg(_)),
            "{:?}: {:?}",
            op,
            fault
        );
        if matches!(fault, Fault::OutOfBounds { .. }) {
            let slice_op = matches!(
                op,
                Op::Load { ptr: false, .. } | Op::Store { ptr: false, .. }
            );
            prop_assert!(slice_op, "{:?}: out of bounds without a slice", op);
        }
        prop_assert!(!fault.to_string().is_empty());
        return Ok(true);
    }

    // The op completed: check what it did.
    let untouched_except = |t: Option<u8>| -> Result<(), TestCaseError> {
        for i in 0..8u8 {
            if Some(i) != t {
                prop_assert_eq!(
                    &after.tiles[i as usize][..],
                    &before.tiles[i as usize][..],
                    "{:?} changed tile {}",
                    op,
                    i
                );
            }
        }
        Ok(())
    };
    match op {
        Op::Ldtilecfg(img) => {
            // L4/L5: palette 0 is INIT; otherwise the image is loaded verbatim; all data zeroed.
            let expected = if img[0] == 0 { [0u8; 64] } else { *img };
            prop_assert_eq!(after.config, expected);
            prop_assert!(
                after.tiles.iter().all(|t| t.iter().all(|&b| b == 0)),
                "L5: data not zeroed"
            );
        }
        Op::Tilerelease => {
            prop_assert_eq!(after.config, [0u8; 64]);
            prop_assert!(after.tiles.iter().all(|t| t.iter().all(|&b| b == 0)));
        }
        // Checked in full above.
        Op::SetTile { .. } => {}
        Op::Sttilecfg | Op::TileData(_) => prop_assert_eq!(&after, &before),
        &Op::SetStartRow(row) => {
            let mut expected = before.config;
            if expected[0] != 0 {
                expected[image::START_ROW] = row;
            }
            prop_assert_eq!(after.config, expected);
            untouched_except(None)?;
        }
        &Op::Tilezero(t) => {
            prop_assert_eq!(after.config, start_row_cleared(before.config), "Z4");
            prop_assert!(after.tiles[t as usize].iter().all(|&b| b == 0), "Z3");
            untouched_except(Some(t))?;
        }
        &Op::Load { t, stride, .. } => {
            prop_assert_eq!(
                after.config,
                start_row_cleared(before.config),
                "T4: start_row"
            );
            untouched_except(Some(t))?;
            let shape = image::shape(&before.config, t);
            let start = before.config[image::START_ROW] as usize;
            let (rows, colsb) = (shape.rows as usize, shape.colsb as usize);
            let tile = &after.tiles[t as usize];
            for r in 0..16 {
                let row = &tile[r * 64..r * 64 + 64];
                if r < start {
                    prop_assert_eq!(
                        row,
                        &before.tiles[t as usize][r * 64..r * 64 + 64],
                        "T4: row {} below start_row",
                        r
                    );
                } else if r < rows {
                    let at = r * stride;
                    prop_assert_eq!(
                        &row[..colsb],
                        &memory_before[at..at + colsb],
                        "T3: row {}",
                        r
                    );
                    prop_assert!(
                        row[colsb..].iter().all(|&b| b == 0),
                        "T3: row {} past colsb",
                        r
                    );
                } else {
                    prop_assert!(row.iter().all(|&b| b == 0), "T3: row {} past rows", r);
                }
            }
        }
        &Op::Store { t, stride, .. } => {
            prop_assert_eq!(
                after.config,
                start_row_cleared(before.config),
                "W3: start_row"
            );
            untouched_except(None)?;
            let shape = image::shape(&before.config, t);
            let start = before.config[image::START_ROW] as usize;
            let (rows, colsb) = (shape.rows as usize, shape.colsb as usize);
            let mut expected = memory_before.clone();
            for r in start..rows {
                let at = r * stride;
                expected[at..at + colsb]
                    .copy_from_slice(&before.tiles[t as usize][r * 64..r * 64 + colsb]);
            }
            prop_assert_eq!(
                &memory_after,
                &expected,
                "W2: exactly colsb bytes of rows start_row..rows"
            );
        }
        &Op::Dot { kind, c, a, b } => {
            prop_assert_eq!(
                after.config,
                start_row_cleared(before.config),
                "D3: start_row"
            );
            untouched_except(Some(c))?;
            let shape = image::shape(&before.config, c);
            let (m_rows, colsb) = (shape.rows as usize, shape.colsb as usize);
            let ct = &after.tiles[c as usize];
            for r in 0..16 {
                let keep = if r < m_rows { colsb } else { 0 };
                prop_assert!(
                    ct[r * 64 + keep..r * 64 + 64].iter().all(|&x| x == 0),
                    "D4: C row {} not zeroed past its columns",
                    r
                );
            }
            if kind < 4 {
                prop_assert_eq!(
                    &ct[..],
                    &int8_reference(&before, kind, (c, a, b))[..],
                    "section 9: {:?}",
                    op
                );
            }
        }
    }
    Ok(false)
}

proptest! {
    #![proptest_config(config(512))]

    /// Random instruction sequences never panic and keep every invariant after every step.
    #[test]
    fn emulator_sequences_keep_invariants(ops in prop::collection::vec(op(), 1..64)) {
        let mut emu = Emulator::new();
        for op in &ops {
            step(&mut emu, op)?;
        }
    }
}

proptest! {
    #![proptest_config(config(1024))]

    /// L2 in isolation: a configured emulator with random tile data, then an image LDTILECFG
    /// rejects: #GP, and the configuration and all 8 KiB of tile data stay as they were.
    #[test]
    fn faulting_ldtilecfg_leaves_state_untouched(
        good in gemm_image(),
        bad in prop_oneof![structured_image(), any_image()]
            .prop_filter("an image LDTILECFG rejects", |img| !spec_loadable(img)),
        seed in any::<u64>(),
        start_row in 0..4u8,
    ) {
        let mut emu = Emulator::new();
        emu.ldtilecfg(&good).unwrap();
        for t in 0..8 {
            let data: [u8; 1024] = bytes(seed ^ u64::from(t), 1024).try_into().unwrap();
            emu.set_tile_bytes(t, &data);
        }
        emu.set_start_row(start_row);
        let before = state(&mut emu);
        let fault = emu.ldtilecfg(&bad);
        prop_assert!(matches!(fault, Err(Fault::GeneralProtection(_))), "{:?}", fault);
        prop_assert_eq!(state(&mut emu), before);
    }
}

/// The generators reach both outcomes of every instruction that can fault, so the properties
/// above check the fault rule and the semantics, not just one of them.
#[test]
fn sequences_reach_success_and_fault_of_every_instruction() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = prop::collection::vec(op(), 1..64);
    // [ok, err] per kind: LDTILECFG, TILEZERO, load, store, int8 dot, float dot, tile_data.
    let mut seen = [[0usize; 2]; 7];
    for _ in 0..200 {
        let ops = strategy.new_tree(&mut runner).unwrap().current();
        let mut emu = Emulator::new();
        for op in &ops {
            let faulted = step(&mut emu, op).unwrap_or_else(|e| panic!("{e}"));
            let kind = match op {
                Op::Ldtilecfg(_) => 0,
                Op::Tilezero(_) => 1,
                Op::Load { .. } => 2,
                Op::Store { .. } => 3,
                Op::Dot { kind, .. } if *kind < 4 => 4,
                Op::Dot { .. } => 5,
                Op::TileData(_) => 6,
                _ => continue,
            };
            seen[kind][usize::from(faulted)] += 1;
        }
    }
    println!("[ok, fault] per kind (LDTILECFG, TILEZERO, load, store, int8 dot, float dot, tile_data): {seen:?}");
    for (kind, [ok, err]) in seen.iter().enumerate() {
        assert!(*ok > 0 && *err > 0, "kind {kind}: {ok} ok, {err} faults");
    }
}
