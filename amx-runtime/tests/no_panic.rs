//! No input makes the emulator panic, and every outcome is the one the fault rules give.
//!
//! The trap engine runs the emulator inside a SIGILL handler of any program, where a panic
//! cannot unwind and aborts the process, and the program may be built with overflow checks on.
//! So every safe method of [`TileUnit`] on [`Emulator`], the `*_ptr` loads and stores (within
//! their contract), the block products and the engine's refusal checks are driven here with
//! arbitrary input: random and mutated configuration images (palettes, reserved bytes, rows and
//! colsb at their limits, any start_row), tile numbers 0..=255, any row operand, slices of any
//! length and strides up to `usize::MAX`, aliased operands, and tiles full of NaN, infinity and
//! denormal bit patterns, in any order and in any state.
//!
//! After each instruction the test checks that a fault left the state as it was, that the
//! outcome (success, #UD, #GP, out of bounds) is the one an independent reading of the
//! configuration predicts, and that the state stays one LDTILECFG accepts. Every property runs
//! once more per kernel path (`AMX_EMULATOR_KERNELS`), each in a child process, since the
//! paths are chosen once per process.

use amx_runtime::block::{bias_a, dot_2x2, tdpbssd_2x2_a_biased, Block, BlockError};
use amx_runtime::rules::{self, image, DotKind, Palette};
use amx_runtime::{engine, Emulator, Fault, PaletteTable, TileUnit, TmulLimits};
use amx_runtime::{ROW_BYTES, TILES, TILE_BYTES};
use amx_test_support::SplitMix64 as Rng;
use proptest::prelude::*;

/// The largest stride in bytes the memory buffer has room for at 16 rows.
const MAX_STRIDE: usize = 160;
/// The memory every load reads from and every store writes into: 16 rows at the largest
/// stride.
const MEM: usize = 15 * MAX_STRIDE + ROW_BYTES;

/// Rows and colsb values at the edges of the rules.
const EDGES: [u16; 11] = [0, 1, 3, 4, 15, 16, 17, 63, 64, 65, 255];

/// A 32-bit pattern rich in the special floats: NaNs, infinities, denormals, zeros.
fn special_word(rng: &mut Rng) -> u32 {
    let sign = (rng.next_u64() as u32) & 0x8000_0000;
    let payload = rng.next_u64() as u32 & 0x007F_FFFF;
    let word = sign
        | match rng.below(8) {
            0 => 0x7F80_0000 | payload.max(1),
            1 => 0x7F80_0000,
            2 => payload,
            3 => 0,
            4 => 0x0080_0000 | payload,
            _ => rng.next_u64() as u32,
        };
    match rng.below(4) {
        // Two bf16/fp16 halves, each of them a special value.
        0 => {
            let (h, l) = (special_half(rng), special_half(rng));
            u32::from(h) << 16 | u32::from(l)
        }
        // Four FP8 bytes, each any pattern (every E5M2 and E4M3 special among them).
        1 => rng.next_u64() as u32,
        _ => word,
    }
}

/// A 16-bit pattern of bf16 or fp16 specials.
fn special_half(rng: &mut Rng) -> u16 {
    let sign = (rng.next_u64() as u16) & 0x8000;
    let low = rng.next_u64() as u16;
    sign | match rng.below(6) {
        0 => 0x7F80 | (low & 0x7F).max(1), // bf16 NaN
        1 => 0x7C00 | (low & 0x3FF),       // fp16 infinity or NaN
        2 => low & 0x007F,                 // bf16 denormal
        3 => low & 0x03FF,                 // fp16 denormal
        _ => low & 0x7FFF,
    }
}

/// `len` bytes of special-rich data from `seed`.
fn data(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 4);
    while out.len() < len {
        out.extend_from_slice(&special_word(&mut rng).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn tile_bytes(seed: u64) -> [u8; TILE_BYTES] {
    let mut out = [0; TILE_BYTES];
    out.copy_from_slice(&data(seed, TILE_BYTES));
    out
}

/// A tile number: mostly a real one, sometimes any byte.
fn tile() -> impl Strategy<Value = u8> {
    prop_oneof![8 => 0..TILES as u8, 1 => 8..16u8, 1 => any::<u8>()]
}

/// A dot product's tile number: few choices, so that operands often alias.
fn operand() -> impl Strategy<Value = u8> {
    prop_oneof![4 => 0..4u8, 4 => 0..TILES as u8, 1 => any::<u8>()]
}

/// A stride in bytes: the ones the memory buffer holds, and those whose products overflow.
fn stride() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0..=MAX_STRIDE,
        1 => Just(usize::MAX),
        1 => Just(usize::MAX / 15 + 1),
        1 => Just(isize::MAX as usize),
        1 => (0..usize::BITS).prop_map(|s| 1usize << s),
        1 => any::<usize>(),
    ]
}

/// A row operand of the AMX-AVX512 row moves: small rows of chunk 0 to 3, or any u32.
fn row_operand() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => (0..20u32, 0..4u32).prop_map(|(r, chunk)| r | chunk << 16),
        1 => any::<u32>(),
    ]
}

/// An image most of whose tiles are R x 4R (so that dot products are often valid), then
/// mutated: bytes set to edge values or anything, colsb words set to edge values.
fn image_bytes() -> impl Strategy<Value = [u8; 64]> {
    let start_row = prop_oneof![3 => Just(0u8), 1 => 0..=17u8];
    // Mostly every tile used; else each at random.
    let used = prop_oneof![2 => Just([true; 8]), 1 => any::<[bool; 8]>()];
    let square = (1..=16u8, used, start_row).prop_map(|(r, used, start)| {
        let shapes =
            core::array::from_fn(|t| used[t].then(|| rules::TileShape::new(r, 4 * u16::from(r))));
        image::encode(1, start, &shapes)
    });
    let shaped = (
        prop::array::uniform8((0..=17u8, 0..=17u16, any::<bool>())),
        prop_oneof![3 => Just(0u8), 1 => 0..=20u8],
    )
        .prop_map(|(tiles, start)| {
            let shapes = core::array::from_fn(|t| {
                let (rows, dwords, odd) = tiles[t];
                let colsb = 4 * dwords - u16::from(odd && dwords > 0);
                (rows > 0).then(|| rules::TileShape::new(rows, colsb))
            });
            image::encode(1, start, &shapes)
        });
    let base = prop_oneof![
        6 => square,
        3 => shaped,
        1 => prop::collection::vec(any::<u8>(), 64).prop_map(|v| {
            let mut out = [0u8; 64];
            out.copy_from_slice(&v);
            out
        }),
    ];
    let byte = prop_oneof![
        prop::sample::select(EDGES.to_vec()).prop_map(|v| v as u8),
        any::<u8>()
    ];
    let mutation = prop_oneof![
        // Any byte (palette, start_row, reserved, a field) to an edge value or anything.
        (0..64usize, byte.clone()).prop_map(|(at, v)| (at, u16::from(v), false)),
        // The palette id.
        (0..=3u8).prop_map(|p| (image::PALETTE_ID, u16::from(p), false)),
        // A rows byte at its edges.
        (0..8usize, prop::sample::select(EDGES.to_vec())).prop_map(|(t, v)| (
            image::ROWS + t,
            v.min(255),
            false
        )),
        // A colsb word at its edges.
        (0..8usize, prop::sample::select(EDGES.to_vec())).prop_map(|(t, v)| (
            image::COLSB + 2 * t,
            v,
            true
        )),
    ];
    let mutations = prop_oneof![
        3 => Just(Vec::new()),
        1 => prop::collection::vec(mutation, 1..3),
    ];
    (base, mutations).prop_map(|(mut img, mutations)| {
        for (at, v, word) in mutations {
            if word {
                img[at..at + 2].copy_from_slice(&v.to_le_bytes());
            } else {
                img[at] = v as u8;
            }
        }
        img
    })
}

/// One call on the unit.
#[derive(Clone, Debug)]
enum Op {
    Ldtilecfg([u8; 64]),
    Sttilecfg,
    Tilerelease,
    Tilezero(u8),
    /// A load (TILELOADD, T1, RS, RST1 by `which`) from `len` bytes at `at` of the memory.
    Load {
        which: u8,
        t: u8,
        at: usize,
        len: usize,
        stride: usize,
    },
    /// The `*_ptr` form of a load, with a stride the memory holds at any row (either sign).
    LoadPtr {
        which: u8,
        t: u8,
        stride: isize,
    },
    Store {
        t: u8,
        len: usize,
        stride: usize,
    },
    StorePtr {
        t: u8,
        stride: isize,
    },
    /// A dot product, by its number in [`dot`].
    Dot {
        which: u8,
        c: u8,
        a: u8,
        b: u8,
    },
    /// A row move, by its number in [`row_move`].
    Row {
        which: u8,
        t: u8,
        row: u32,
    },
    SetStartRow(u8),
    SetTileBytes(u8, u64),
    /// The trap engine's direct write into a tile (`engine::tile_bytes_mut`).
    WriteTileInPlace(u8, u64),
    TileData(u8),
}

fn op() -> impl Strategy<Value = Op> {
    let len = prop_oneof![1 => Just(0usize), 1 => 0..=64usize, 4 => 0..=MEM];
    let ptr_stride = -(MAX_STRIDE as isize)..=MAX_STRIDE as isize;
    prop_oneof![
        3 => image_bytes().prop_map(Op::Ldtilecfg),
        1 => Just(Op::Sttilecfg),
        1 => Just(Op::Tilerelease),
        2 => tile().prop_map(Op::Tilezero),
        6 => (0..4u8, tile(), 0..=8usize, len.clone(), stride()).prop_map(
            |(which, t, at, len, stride)| Op::Load { which, t, at, len, stride }
        ),
        2 => (0..4u8, tile(), ptr_stride.clone())
            .prop_map(|(which, t, stride)| Op::LoadPtr { which, t, stride }),
        3 => (tile(), len, stride()).prop_map(|(t, len, stride)| Op::Store { t, len, stride }),
        1 => (tile(), ptr_stride).prop_map(|(t, stride)| Op::StorePtr { t, stride }),
        8 => (0..12u8, operand(), operand(), operand())
            .prop_map(|(which, c, a, b)| Op::Dot { which, c, a, b }),
        3 => (0..6u8, tile(), row_operand()).prop_map(|(which, t, row)| Op::Row { which, t, row }),
        1 => any::<u8>().prop_map(Op::SetStartRow),
        3 => (tile(), any::<u64>()).prop_map(|(t, seed)| Op::SetTileBytes(t, seed)),
        1 => (tile(), any::<u64>()).prop_map(|(t, seed)| Op::WriteTileInPlace(t, seed)),
        1 => tile().prop_map(Op::TileData),
    ]
}

/// Dot product `which` (0..12) on `emu`.
fn dot(emu: &mut Emulator, which: u8, (c, a, b): (u8, u8, u8)) -> Result<(), Fault> {
    match which {
        0 => emu.tdpbssd(c, a, b),
        1 => emu.tdpbsud(c, a, b),
        2 => emu.tdpbusd(c, a, b),
        3 => emu.tdpbuud(c, a, b),
        4 => emu.tdpbf16ps(c, a, b),
        5 => emu.tdpfp16ps(c, a, b),
        6 => emu.tdpbf8ps(c, a, b),
        7 => emu.tdpbhf8ps(c, a, b),
        8 => emu.tdphbf8ps(c, a, b),
        9 => emu.tdphf8ps(c, a, b),
        10 => emu.tcmmimfp16ps(c, a, b),
        _ => emu.tcmmrlfp16ps(c, a, b),
    }
}

/// Row move `which` (0..6) on `emu`.
fn row_move(emu: &mut Emulator, which: u8, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault> {
    match which {
        0 => emu.tilemovrow(t, row),
        1 => emu.tcvtrowd2ps(t, row),
        2 => emu.tcvtrowps2bf16h(t, row),
        3 => emu.tcvtrowps2bf16l(t, row),
        4 => emu.tcvtrowps2phh(t, row),
        _ => emu.tcvtrowps2phl(t, row),
    }
}

/// Load `which` (0..4) from a slice.
fn load(emu: &mut Emulator, which: u8, t: u8, src: &[u8], stride: usize) -> Result<(), Fault> {
    match which {
        0 => emu.tileloadd(t, src, stride),
        1 => emu.tileloaddt1(t, src, stride),
        2 => emu.tileloaddrs(t, src, stride),
        _ => emu.tileloaddrst1(t, src, stride),
    }
}

/// Load `which` (0..4) through a pointer.
///
/// # Safety
/// As [`TileUnit::tileloadd_ptr`].
unsafe fn load_ptr(
    emu: &mut Emulator,
    which: u8,
    t: u8,
    src: *const u8,
    stride: isize,
) -> Result<(), Fault> {
    // SAFETY: the caller's contract, which each form shares.
    unsafe {
        match which {
            0 => emu.tileloadd_ptr(t, src, stride),
            1 => emu.tileloaddt1_ptr(t, src, stride),
            2 => emu.tileloaddrs_ptr(t, src, stride),
            _ => emu.tileloaddrst1_ptr(t, src, stride),
        }
    }
}

/// The configuration's fields, read independently of the crate: (palette, start_row, rows,
/// colsb) of tile `t`, with rows and colsb 0 for `t >= 8`.
fn fields(cfg: &[u8; 64], t: u8) -> (u8, u8, usize, usize) {
    let (rows, colsb) = match usize::from(t) {
        t if t < 8 => (
            usize::from(cfg[48 + t]),
            usize::from(u16::from_le_bytes([cfg[16 + 2 * t], cfg[17 + 2 * t]])),
        ),
        _ => (0, 0),
    };
    (cfg[0], cfg[1], rows, colsb)
}

/// What a load or store of tile `t` with `stride` over `len` bytes should give: `Ok`, or
/// `Err(true)` for a #UD, `Err(false)` for out of bounds.
fn memory_outcome(cfg: &[u8; 64], t: u8, stride: usize, len: usize) -> Result<(), bool> {
    let (palette, start, rows, colsb) = fields(cfg, t);
    if palette == 0 || rows == 0 || colsb == 0 || colsb % 4 != 0 || usize::from(start) >= rows {
        return Err(true);
    }
    // The last row's end, in u128 so that nothing overflows.
    let needed = (rows as u128 - 1) * stride as u128 + colsb as u128;
    if needed > len as u128 {
        Err(false)
    } else {
        Ok(())
    }
}

fn kind_of(r: &Result<(), Fault>) -> Result<(), bool> {
    match r {
        Ok(()) => Ok(()),
        Err(Fault::OutOfBounds { .. }) => Err(false),
        Err(_) => Err(true),
    }
}

/// The state a fault must leave as it was: the configuration and every tile's bytes.
fn snapshot(emu: &Emulator) -> ([u8; 64], Vec<u8>) {
    let mut tiles = Vec::with_capacity(TILES * TILE_BYTES);
    for t in 0..TILES as u8 {
        tiles.extend_from_slice(emu.tile_bytes(t).expect("tiles 0..8 exist"));
    }
    (emu.loaded_config(), tiles)
}

/// Runs `op`, checking its outcome against the rules and the state afterwards.
fn step(emu: &mut Emulator, op: &Op, mem: &mut [u8]) -> Result<(), TestCaseError> {
    let before = snapshot(emu);
    let cfg = before.0;
    let configured = cfg[0] != 0;
    // The outcome of an instruction that executes (clears start_row when it succeeds).
    let result: Result<(), Fault> = match *op {
        Op::Ldtilecfg(ref img) => {
            let accepts = engine::ldtilecfg_accepts(img, emu.palette_table());
            let r = emu.ldtilecfg(img);
            prop_assert_eq!(r.is_ok(), accepts, "LDTILECFG of {:02x?}", img);
            match r {
                Ok(()) if img[0] == 0 => prop_assert_eq!(emu.loaded_config(), [0; 64]),
                Ok(()) => prop_assert_eq!(&emu.loaded_config(), img),
                Err(ref e) => prop_assert!(matches!(e, Fault::GeneralProtection(_)), "{e:?}"),
            }
            if r.is_ok() {
                for t in 0..TILES as u8 {
                    prop_assert!(emu.tile_bytes(t) == Some(&[0; TILE_BYTES]));
                }
                return Ok(());
            }
            r
        }
        Op::Sttilecfg => {
            prop_assert_eq!(emu.sttilecfg(), cfg);
            return Ok(());
        }
        Op::Tilerelease => {
            emu.tilerelease();
            prop_assert_eq!(emu.loaded_config(), [0; 64]);
            prop_assert!(!emu.is_configured());
            return Ok(());
        }
        Op::Tilezero(t) => {
            let (_, _, rows, colsb) = fields(&cfg, t);
            let r = emu.tilezero(t);
            prop_assert_eq!(
                r.is_ok(),
                configured && rows > 0 && colsb > 0,
                "TILEZERO t{}",
                t
            );
            prop_assert_eq!(
                r.is_ok(),
                engine::tilezero_refusal(&cfg, t).is_ok(),
                "TILEZERO against the engine's check"
            );
            if r.is_ok() {
                prop_assert!(emu.tile_bytes(t) == Some(&[0; TILE_BYTES]));
            }
            r
        }
        Op::Load {
            which,
            t,
            at,
            len,
            stride,
        } => {
            let src = &mem[at.min(MEM)..(at + len).min(MEM)];
            let want = memory_outcome(&cfg, t, stride, src.len());
            let r = load(emu, which, t, src, stride);
            prop_assert_eq!(
                kind_of(&r),
                want,
                "load t{} stride {} len {}",
                t,
                stride,
                len
            );
            prop_assert_eq!(
                engine::tile_memory_refusal(&cfg, t).is_ok(),
                want != Err(true),
                "load against the engine's check"
            );
            if r.is_ok() {
                // Rows start_row..rows hold memory, zero-extended past colsb; rows past rows
                // are zero; rows below start_row are kept.
                let (_, start, rows, colsb) = fields(&cfg, t);
                let data = emu.tile_bytes(t).expect("a loaded tile exists");
                for (r, row) in data.chunks_exact(ROW_BYTES).enumerate() {
                    let old = &before.1[usize::from(t) * TILE_BYTES + r * ROW_BYTES..][..64];
                    if r < usize::from(start) {
                        prop_assert_eq!(row, old, "row {} below start_row", r);
                    } else if r < rows {
                        prop_assert_eq!(&row[..colsb], &src[r * stride..][..colsb]);
                        prop_assert!(row[colsb..].iter().all(|&x| x == 0));
                    } else {
                        prop_assert!(row.iter().all(|&x| x == 0), "row {} past rows", r);
                    }
                }
            }
            r
        }
        Op::LoadPtr { which, t, stride } => {
            // Row r of at most 16 lies at r * stride from the pointer: the first row for a
            // positive stride, the last for a negative one, so every row is inside `mem`.
            let first = if stride < 0 {
                15 * stride.unsigned_abs()
            } else {
                0
            };
            let mut by_slice = emu.clone();
            // SAFETY: every row r < 16 at `first + r * stride` lies inside `mem` (MEM holds
            // 16 rows of 64 bytes at the largest stride), and the configuration has at most 16
            // rows of at most 64 bytes (LDTILECFG refuses more).
            let r = unsafe { load_ptr(emu, which, t, mem.as_ptr().add(first), stride) };
            let want = memory_outcome(&cfg, t, stride.unsigned_abs(), usize::MAX);
            prop_assert_eq!(kind_of(&r), want, "pointer load t{} stride {}", t, stride);
            if stride >= 0 {
                // The same as the slice form on the same bytes.
                let by = load(&mut by_slice, which, t, mem, stride as usize);
                prop_assert_eq!(by.is_ok(), r.is_ok());
                prop_assert_eq!(snapshot(&by_slice), snapshot(emu));
            }
            r
        }
        Op::Store { t, len, stride } => {
            let want = memory_outcome(&cfg, t, stride, len.min(MEM));
            let dst = &mut mem[..len.min(MEM)];
            let old = dst.to_vec();
            let r = emu.tilestored(t, dst, stride);
            prop_assert_eq!(
                kind_of(&r),
                want,
                "store t{} stride {} len {}",
                t,
                stride,
                len
            );
            if r.is_err() {
                prop_assert!(*dst == *old, "a refused store wrote memory");
            }
            r
        }
        Op::StorePtr { t, stride } => {
            let first = if stride < 0 {
                15 * stride.unsigned_abs()
            } else {
                0
            };
            // SAFETY: as for the pointer load; `mem` is not otherwise borrowed meanwhile.
            let r = unsafe { emu.tilestored_ptr(t, mem.as_mut_ptr().add(first), stride) };
            let want = memory_outcome(&cfg, t, stride.unsigned_abs(), usize::MAX);
            prop_assert_eq!(kind_of(&r), want, "pointer store t{} stride {}", t, stride);
            r
        }
        Op::Dot { which, c, a, b } => {
            let limits = emu.tmul_limits();
            let allowed = engine::dot_refusal(&cfg, (c, a, b), limits).is_ok();
            let r = dot(emu, which, (c, a, b));
            prop_assert_eq!(
                r.is_ok(),
                allowed,
                "dot {} on ({}, {}, {}): {:?}",
                which,
                c,
                a,
                b,
                r
            );
            if r.is_ok() {
                prop_assert!(c != a && c != b && a != b && usize::from(c.max(a).max(b)) < TILES);
            }
            r
        }
        Op::Row { which, t, row } => {
            let (_, _, rows, colsb) = fields(&cfg, t);
            let r = row_move(emu, which, t, row);
            let allowed = configured && rows > 0 && colsb > 0 && colsb % 4 == 0;
            prop_assert_eq!(
                r.is_ok(),
                allowed,
                "row move {} t{} row {:#x}",
                which,
                t,
                row
            );
            if let Ok(out) = r {
                let (index, chunk) = ((row & 0xFFFF) as usize, (row >> 16) as usize);
                if index >= rows || chunk > 0 {
                    prop_assert_eq!(out, [0; ROW_BYTES], "row {:#x} past the tile's", row);
                } else {
                    prop_assert!(out[colsb..].iter().all(|&x| x == 0), "dwords past colsb");
                    if which == 0 {
                        let at = usize::from(t) * TILE_BYTES + index * ROW_BYTES;
                        prop_assert_eq!(&out[..colsb], &before.1[at..at + colsb]);
                    }
                }
            }
            r.map(|_| ())
        }
        Op::SetStartRow(row) => {
            emu.set_start_row(row);
            let want = if configured { row } else { 0 };
            prop_assert_eq!(emu.loaded_config()[1], want);
            return Ok(());
        }
        Op::SetTileBytes(t, seed) => {
            let bytes = tile_bytes(seed);
            emu.set_tile_bytes(t, &bytes);
            prop_assert_eq!(emu.tile_bytes(t).is_some(), usize::from(t) < TILES);
            if let Some(now) = emu.tile_bytes(t) {
                prop_assert!(*now == bytes);
            }
            return Ok(());
        }
        Op::WriteTileInPlace(t, seed) => {
            let bytes = tile_bytes(seed);
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            match engine::tile_bytes_mut(emu, t) {
                Some(tile) => *tile = bytes,
                None => prop_assert!(usize::from(t) >= TILES),
            }
            #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
            emu.set_tile_bytes(t, &bytes);
            if let Some(now) = emu.tile_bytes(t) {
                prop_assert!(*now == bytes);
            }
            return Ok(());
        }
        Op::TileData(t) => {
            let r = emu.tile_data(t);
            prop_assert_eq!(r.is_ok(), usize::from(t) < TILES);
            if let Ok(bytes) = r {
                prop_assert!(Some(&bytes) == emu.tile_bytes(t));
            }
            return Ok(());
        }
    };
    match result {
        Err(_) => {
            // A fault changes nothing.
            prop_assert!(
                snapshot(emu) == before,
                "{:?} faulted but changed the state",
                op
            );
        }
        // An instruction that executes clears start_row.
        Ok(()) => prop_assert_eq!(emu.loaded_config()[1], 0, "start_row after {:?}", op),
    }
    Ok(())
}

/// The state holds an image LDTILECFG accepts, or the INIT state.
fn invariant(emu: &Emulator) -> Result<(), TestCaseError> {
    let cfg = emu.loaded_config();
    prop_assert!(engine::ldtilecfg_accepts(&cfg, emu.palette_table()));
    prop_assert_eq!(cfg[0] == 0, cfg == [0; 64], "{:02x?}", cfg);
    prop_assert_eq!(emu.is_configured(), cfg[0] != 0);
    Ok(())
}

/// An emulator written in place, as the trap engine makes its per-thread unit.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn made_in_place() -> Emulator {
    let mut slot = Box::new(std::mem::MaybeUninit::<Emulator>::uninit());
    // SAFETY: the box holds space for an Emulator, suitably aligned; `init_emulator` writes
    // every field, so the value is initialized when it is read out (an Emulator owns nothing,
    // so the copy left behind needs no drop).
    unsafe {
        engine::init_emulator(slot.as_mut_ptr());
        slot.assume_init_read()
    }
}

/// Where the trap engine does not run, the ordinary constructor.
#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn made_in_place() -> Emulator {
    Emulator::new()
}

/// A unit to run on: the architectural one, or one with another table and TMUL limits (most
/// tables with larger tiles are refused by `with_limits`; the architectural unit runs then).
fn unit() -> impl Strategy<Value = Emulator> {
    let palette =
        (1..=16u16, 1..=64u16, 0..=9u16).prop_map(|(max_rows, bytes_per_row, names)| Palette {
            max_rows,
            bytes_per_row,
            max_names: names,
            ..Palette::PALETTE_1
        });
    let limits = (any::<u8>(), any::<u16>()).prop_map(|(maxk, maxn)| TmulLimits { maxk, maxn });
    prop_oneof![
        5 => Just(()).prop_map(|()| Emulator::new()),
        // As the trap engine makes its per-thread unit: written in place.
        1 => Just(()).prop_map(|()| made_in_place()),
        1 => (prop::collection::vec(palette, 0..3), limits).prop_map(|(palettes, limits)| {
            Emulator::with_limits(PaletteTable::new(&palettes), limits)
                .unwrap_or_else(|_| Emulator::new())
        }),
    ]
}

proptest! {
    #![proptest_config(amx_test_support::proptest_config(1024))]

    /// Any sequence of calls, from the INIT state, on memory full of special floats.
    #[test]
    fn emulator_never_panics(
        mut emu in unit(),
        first in image_bytes(),
        ops in prop::collection::vec(op(), 0..40),
        seed in any::<u64>(),
    ) {
        let mut mem = data(seed, MEM);
        // A configuration first, so that most sequences run on a configured unit.
        for op in std::iter::once(&Op::Ldtilecfg(first)).chain(&ops) {
            step(&mut emu, op, &mut mem)?;
            invariant(&emu)?;
        }
    }

    /// The trap engine's checks on any 64 bytes (not only images the unit holds) and any
    /// operands.
    #[test]
    fn engine_checks_never_panic(
        cfg in image_bytes(),
        t in any::<u8>(),
        tiles in (any::<u8>(), any::<u8>(), any::<u8>()),
        maxk in any::<u8>(),
        maxn in any::<u16>(),
        palettes in prop::collection::vec(any::<[u16; 5]>(), 0..20),
    ) {
        // Any table, as a CPU or VM could report it (entries past the table's room dropped).
        let palettes: Vec<Palette> = palettes
            .iter()
            .map(|&[total_tile_bytes, bytes_per_tile, bytes_per_row, max_names, max_rows]| {
                Palette {
                    total_tile_bytes,
                    bytes_per_tile,
                    bytes_per_row,
                    max_names,
                    max_rows,
                }
            })
            .collect();
        let table = PaletteTable::new(&palettes);
        let _ = engine::ldtilecfg_accepts(&cfg, &table);
        let _ = rules::validate(&cfg, &table);
        if let Ok(mut emu) = Emulator::with_limits(table, TmulLimits { maxk, maxn }) {
            // Whatever the table allows, the unit holds it or refuses it.
            if emu.ldtilecfg(&cfg).is_ok() {
                for t in 0..TILES as u8 {
                    let _ = emu.tilezero(t);
                    let _ = emu.tilemovrow(t, 0);
                }
                let _ = emu.tdpbssd(tiles.0, tiles.1, tiles.2);
                let _ = emu.tdpbf16ps(tiles.0, tiles.1, tiles.2);
                let _ = emu.tdphf8ps(tiles.0, tiles.1, tiles.2);
            }
        }
        let _ = engine::tilezero_refusal(&cfg, t);
        let _ = engine::tile_memory_refusal(&cfg, t);
        let _ = engine::dot_refusal(&cfg, tiles, TmulLimits { maxk, maxn });
        let _ = engine::ldtilecfg_accepts(&cfg, &PaletteTable::ARCHITECTURAL);
        let _ = engine::ldtilecfg_accepts(&cfg, &PaletteTable::NONE);
    }
}

/// One past the last byte `steps` k-steps `step` bytes apart read, or `None` on overflow.
fn block_needed(steps: usize, step: usize) -> Option<usize> {
    match steps {
        0 => Some(0),
        _ => (steps - 1).checked_mul(step)?.checked_add(2048),
    }
}

/// A block operand: a buffer length, the step between k-steps and the step count's part.
fn block_step() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => prop::sample::select(vec![0usize, 1, 63, 64, 1024, 2047, 2048, 2049, 4096]),
        1 => 0..=4200usize,
        1 => Just(usize::MAX),
        1 => any::<usize>(),
    ]
}

proptest! {
    #![proptest_config(amx_test_support::proptest_config(128))]

    /// The block products on any buffers, steps and step counts: out of bounds or computed,
    /// with C unchanged when refused, and the biased TDPBSSD equal to the plain one.
    #[test]
    fn block_products_never_panic(
        kind in 0..6u8,
        (a_len, b_len) in (0..=6200usize, 0..=6200usize),
        (a_step, b_step) in (block_step(), block_step()),
        steps in prop_oneof![4 => 0..=3usize, 1 => Just(usize::MAX), 1 => any::<usize>()],
        seed in any::<u64>(),
    ) {
        let kind = [
            DotKind::Tdpbssd,
            DotKind::Tdpbsud,
            DotKind::Tdpbusd,
            DotKind::Tdpbuud,
            DotKind::Tdpbf16ps,
            DotKind::Tdpfp16ps,
        ][usize::from(kind)];
        let (a, b) = (data(seed, a_len), data(seed ^ 1, b_len));
        let fits = |len: usize, step: usize| block_needed(steps, step).is_some_and(|n| n <= len);
        let ok = fits(a_len, a_step) && fits(b_len, b_step);
        // A valid huge step count would run for ever (step 0): not drawn.
        prop_assume!(!ok || steps <= 3);
        let mut c = Block::zeroed();
        for (tile, s) in c.tiles.iter_mut().zip(1..) {
            *tile = tile_bytes(seed.wrapping_add(s));
        }
        let old = c.clone();
        let r = dot_2x2(kind, &mut c, (&a, a_step), (&b, b_step), steps);
        prop_assert_eq!(r.is_ok(), ok, "{:?}", r);
        if let Err(BlockError::OutOfBounds { needed, len, .. }) = r {
            prop_assert!(needed > len);
            prop_assert!(c == old);
        }
        if kind == DotKind::Tdpbssd {
            let mut biased = a.clone();
            bias_a(&mut biased);
            let mut fast = old.clone();
            let r = tdpbssd_2x2_a_biased(&mut fast, (&biased, a_step), (&b, b_step), steps);
            prop_assert_eq!(r.is_ok(), ok);
            prop_assert!(fast == c);
        }
        for t in [0, 3, 4, usize::MAX] {
            for (row, col) in [(0, 0), (15, 15), (16, 0), (0, 16), (usize::MAX, usize::MAX)] {
                let _ = c.dword(t, row, col);
            }
        }
    }
}

/// The kernel paths `AMX_EMULATOR_KERNELS` selects.
const KERNELS: [&str; 4] = ["avx512", "avx-vnni", "avx2", "portable"];

/// The properties again under each kernel path, each in a child process (a process chooses
/// its paths once).
#[test]
fn every_kernel_path_never_panics() {
    if amx_test_support::in_child() {
        return;
    }
    for kernels in KERNELS {
        for test in [
            "emulator_never_panics",
            "block_products_never_panic",
            "block_steps_past_the_last_are_not_located",
        ] {
            let mut child = amx_test_support::Child::new(test).env("AMX_EMULATOR_KERNELS", kernels);
            if std::env::var_os("PROPTEST_CASES").is_none() {
                // A quarter of the cases per path: the default path ran them all already.
                let cases = if test == "emulator_never_panics" {
                    "256"
                } else {
                    "32"
                };
                child = child.env("PROPTEST_CASES", cases);
            }
            let out = child.run();
            assert!(
                out.passed(),
                "{test} with AMX_EMULATOR_KERNELS={kernels}: {}",
                out.stderr
            );
        }
    }
}

/// The integer kinds of the block products.
const INT8_KINDS: [DotKind; 4] = [
    DotKind::Tdpbssd,
    DotKind::Tdpbsud,
    DotKind::Tdpbusd,
    DotKind::Tdpbuud,
];

/// Regression: the fused AVX-VNNI block kernel located every step slot of a chunk of four,
/// also the slots past the last step, as `(s0 + j) * step`: one step with a step distance of
/// `usize::MAX` overflowed there (found by [`block_products_never_panic`] under
/// `AMX_EMULATOR_KERNELS=avx-vnni`). A distance between steps plays no part in one step, so
/// the result is that of distance 0; and step counts that end a chunk early compute what the
/// same steps laid out back to back do.
#[test]
fn block_steps_past_the_last_are_not_located() {
    let (a, b) = (data(1, 5 * 2048), data(2, 5 * 2048));
    for kind in INT8_KINDS {
        let mut want = Block::zeroed();
        dot_2x2(kind, &mut want, (&a[..2048], 0), (&b[..2048], 0), 1).expect("one step fits");
        for step in [
            usize::MAX,
            usize::MAX / 2,
            usize::MAX / 3 + 1,
            isize::MAX as usize,
        ] {
            let mut c = Block::zeroed();
            let r = dot_2x2(kind, &mut c, (&a[..2048], step), (&b[..2048], step), 1);
            assert_eq!(r, Ok(()), "{kind:?}, step {step}");
            assert!(c == want, "{kind:?}, step {step}");
            if kind == DotKind::Tdpbssd {
                let mut biased = a[..2048].to_vec();
                bias_a(&mut biased);
                let mut fast = Block::zeroed();
                let r = tdpbssd_2x2_a_biased(&mut fast, (&biased, step), (&b[..2048], step), 1);
                assert_eq!(r, Ok(()));
                assert!(fast == want, "biased, step {step}");
            }
        }
        // 1, 2, 3 and 5 steps of exactly fitting buffers (a chunk ends early in each).
        for steps in [1, 2, 3, 5] {
            let len = steps * 2048;
            let (mut c, mut by_one) = (Block::zeroed(), Block::zeroed());
            dot_2x2(kind, &mut c, (&a[..len], 2048), (&b[..len], 2048), steps).expect("fits");
            for s in 0..steps {
                let (sa, sb) = (&a[s * 2048..][..2048], &b[s * 2048..][..2048]);
                dot_2x2(kind, &mut by_one, (sa, 0), (sb, 0), 1).expect("fits");
            }
            assert!(c == by_one, "{kind:?}, {steps} steps");
        }
    }
}
