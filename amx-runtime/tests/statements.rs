//! The numbered statements of docs/semantics.md sections 2-8 (LDTILECFG, STTILECFG, TILERELEASE,
//! TILEZERO, TILELOADD, TILESTORED, TDP*), each run on the emulator everywhere and on the silicon
//! code path where it can run: the silicon, or the trap engine on x86-64 Linux without AMX
//! (skipped with the reason elsewhere).
//!
//! Statements that need tile data the silicon can only get through XRSTOR (prefilled bytes past a
//! tile's shape) are checked on the emulator with `Emulator::set_tile_bytes`.

use amx_runtime::rules::image;
use amx_runtime::{Emulator, Fault, TileShape, TileUnit};

/// Generates `emulator` and `hardware` tests from one body generic over the tile unit.
macro_rules! on_both {
    ($($(#[$doc:meta])* fn $name:ident<$u:ident>($unit:ident) $body:block)*) => {$(
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            $(#[$doc])*
            fn run<$u: TileUnit>($unit: &mut $u) $body

            #[test]
            fn emulator() {
                run(&mut Emulator::new());
            }

            #[test]
            fn hardware() {
                if let Some(mut hw) = amx_test_support::needs::silicon() {
                    run(&mut hw);
                    hw.tilerelease();
                }
            }
        }
    )*};
}

/// A palette-1 image with the given (tile, rows, colsb) and start_row.
fn cfg(start_row: u8, tiles: &[(usize, u8, u16)]) -> [u8; 64] {
    let mut shapes = [None; 8];
    for &(t, rows, colsb) in tiles {
        shapes[t] = Some(TileShape::new(rows, colsb));
    }
    image::encode(1, start_row, &shapes)
}

fn is_gp(r: Result<(), Fault>) -> bool {
    matches!(r, Err(Fault::GeneralProtection(_)))
}

fn is_ud(r: Result<(), Fault>) -> bool {
    matches!(r, Err(Fault::InvalidOpcode(_)))
}

/// Bytes 0, 1, 2, ... wrapping, as memory to load from.
fn ramp(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

fn full16x64() -> [u8; 64] {
    cfg(0, &(0..8).map(|t| (t, 16, 64)).collect::<Vec<_>>())
}

on_both! {
    /// L1: every image LDTILECFG rejects raises #GP.
    fn l1_gp_images<U>(u) {
        let base = cfg(0, &[(0, 16, 64)]);
        let mut bad = Vec::new();
        for (range, value) in [(2..16, 0x01u8), (32..48, 0x80), (56..64, 0x01)] {
            for offset in range {
                let mut img = base;
                img[offset] = value;
                bad.push(img);
            }
        }
        for palette in [2u8, 3, 128, 255] {
            let mut img = base;
            img[0] = palette;
            bad.push(img);
        }
        bad.push(cfg(0, &[(0, 16, 65)]));
        bad.push(cfg(0, &[(7, 16, 65)]));
        bad.push(cfg(0, &[(0, 16, 0x100)]));
        bad.push(cfg(0, &[(0, 16, 0x140)]));
        bad.push(cfg(0, &[(0, 17, 64)]));
        bad.push(cfg(0, &[(0, 255, 64)]));
        bad.push(cfg(0, &[(0, 16, 0)]));
        bad.push(cfg(0, &[(0, 0, 64)]));
        for img in &bad {
            assert!(is_gp(u.ldtilecfg(img)), "accepted {img:02x?}");
        }
    }

    /// L2: a faulting LDTILECFG leaves the previous configuration and tile data unchanged.
    fn l2_fault_keeps_state<U>(u) {
        let good = cfg(3, &[(0, 4, 16), (1, 4, 16)]);
        u.ldtilecfg(&good).unwrap();
        let mem = ramp(64);
        u.tileloadd(0, &mem, 16).unwrap();
        let data = u.tile_data(0).unwrap();
        let after_load = u.sttilecfg();
        assert!(is_gp(u.ldtilecfg(&cfg(0, &[(0, 17, 64)]))));
        assert_eq!(u.sttilecfg(), after_load);
        assert_eq!(u.tile_data(0).unwrap(), data);
    }

    /// L3: unused tiles, all-unused palette 1, colsb not a multiple of 4, and any start_row are
    /// accepted; start_row is stored verbatim.
    fn l3_accepted<U>(u) {
        u.ldtilecfg(&cfg(0, &[(1, 16, 64)])).unwrap();
        let empty = cfg(0, &[]);
        u.ldtilecfg(&empty).unwrap();
        let mut expect = [0u8; 64];
        expect[0] = 1;
        assert_eq!(u.sttilecfg(), expect);
        for colsb in [1u16, 6, 63] {
            u.ldtilecfg(&cfg(0, &[(2, 3, colsb)])).unwrap();
        }
        for start_row in 0..=255u8 {
            let img = cfg(start_row, &[(0, 2, 8)]);
            u.ldtilecfg(&img).unwrap();
            assert_eq!(u.sttilecfg(), img);
        }
    }

    /// L4: palette 0 ignores every other byte and gives the INIT state.
    fn l4_palette0_is_init<U>(u) {
        u.ldtilecfg(&full16x64()).unwrap();
        let mut img = [0xFFu8; 64];
        img[0] = 0;
        img[1] = 7;
        u.ldtilecfg(&img).unwrap();
        assert_eq!(u.sttilecfg(), [0; 64]);
        assert!(is_ud(u.tilezero(0)));
        assert_eq!(u.tile_data(0).unwrap(), [0; 1024]);
    }

    /// L5: LDTILECFG zeroes all tile data, even with the identical configuration.
    fn l5_load_zeroes<U>(u) {
        let img = full16x64();
        u.ldtilecfg(&img).unwrap();
        let mem = ramp(1024);
        for t in 0..8 {
            u.tileloadd(t, &mem, 64).unwrap();
        }
        assert_eq!(u.tile_data(5).unwrap().to_vec(), mem);
        u.ldtilecfg(&img).unwrap();
        for t in 0..8 {
            assert_eq!(u.tile_data(t).unwrap(), [0; 1024], "tile {t}");
        }
    }

    /// L6: no alignment requirement.
    fn l6_unaligned<U>(u) {
        let mut buf = [0u8; 65];
        buf[1..].copy_from_slice(&cfg(0, &[(0, 2, 8)]));
        let img: &[u8; 64] = buf[1..].try_into().unwrap();
        u.ldtilecfg(img).unwrap();
        assert_eq!(&u.sttilecfg(), img);
    }

    /// S1-S3: STTILECFG writes zeros when unconfigured, the exact image (start_row included)
    /// otherwise, and does not clear start_row.
    fn s1_s3_sttilecfg<U>(u) {
        assert_eq!(u.sttilecfg(), [0; 64]);
        let img = cfg(9, &[(0, 16, 64), (5, 10, 40)]);
        u.ldtilecfg(&img).unwrap();
        assert_eq!(u.sttilecfg(), img);
        assert_eq!(u.sttilecfg(), img);
        assert_eq!(u.sttilecfg()[1], 9);
        u.tilerelease();
        assert_eq!(u.sttilecfg(), [0; 64]);
    }

    /// R1-R2: after TILERELEASE every tile instruction is #UD; releasing twice is fine.
    fn r1_r2_release<U>(u) {
        u.ldtilecfg(&full16x64()).unwrap();
        u.tilerelease();
        assert_eq!(u.sttilecfg(), [0; 64]);
        let mem = [0u8; 1024];
        let mut out = [0u8; 1024];
        assert!(is_ud(u.tilezero(0)));
        assert!(is_ud(u.tileloadd(0, &mem, 64)));
        assert!(is_ud(u.tileloaddt1(0, &mem, 64)));
        assert!(is_ud(u.tilestored(0, &mut out, 64)));
        assert!(is_ud(u.tdpbssd(0, 1, 2)));
        assert!(is_ud(u.tdpbf16ps(0, 1, 2)));
        u.tilerelease();
        u.tilerelease();
    }

    /// Z1: TILEZERO #UD when unconfigured, on an unused tile, and on a tile number past 7.
    fn z1_tilezero_ud<U>(u) {
        assert!(is_ud(u.tilezero(0)));
        u.ldtilecfg(&cfg(0, &[(0, 16, 64)])).unwrap();
        assert!(is_ud(u.tilezero(1)));
        assert!(is_ud(u.tilezero(8)));
        u.tilezero(0).unwrap();
    }

    /// Z2-Z4: no colsb % 4 and no start_row check; all 1024 bytes zeroed; other tiles untouched;
    /// start_row reset to 0.
    fn z2_z4_tilezero<U>(u) {
        u.ldtilecfg(&cfg(3, &[(0, 3, 6), (1, 16, 64), (2, 16, 64)])).unwrap();
        u.tilezero(0).unwrap();
        assert_eq!(u.sttilecfg()[1], 0);
        let mem = ramp(1024);
        u.tileloadd(1, &mem, 64).unwrap();
        u.tileloadd(2, &mem, 64).unwrap();
        u.tilezero(1).unwrap();
        assert_eq!(u.tile_data(1).unwrap(), [0; 1024]);
        assert_eq!(u.tile_data(2).unwrap().to_vec(), mem);
    }

    /// T1/W1: TILELOADD, TILELOADDT1 and TILESTORED #UD when unconfigured, on an unused tile,
    /// colsb % 4 != 0, start_row >= rows, and a tile number past 7.
    fn t1_w1_memory_ud<U>(u) {
        let mem = [0u8; 2048];
        let mut out = [0u8; 2048];
        let all = |u: &mut U, t: u8, out: &mut [u8]| {
            [
                u.tileloadd(t, &mem, 64),
                u.tileloaddt1(t, &mem, 64),
                u.tilestored(t, out, 64),
            ]
        };
        assert!(all(u, 0, &mut out).into_iter().all(is_ud));
        u.ldtilecfg(&cfg(0, &[(0, 4, 8), (1, 4, 6), (2, 4, 62)])).unwrap();
        for t in [1u8, 2, 3, 8] {
            assert!(all(u, t, &mut out).into_iter().all(is_ud), "tile {t}");
        }
        for op in 0..3 {
            u.ldtilecfg(&cfg(4, &[(0, 4, 8)])).unwrap();
            let r = all(u, 0, &mut out)[op].clone();
            assert!(is_ud(r), "op {op} with start_row == rows");
        }
    }

    /// T2: stride 0 reads the same row for every row.
    fn t2_stride_zero<U>(u) {
        u.ldtilecfg(&cfg(0, &[(0, 4, 8)])).unwrap();
        let mem = ramp(8);
        u.tileloadd(0, &mem, 0).unwrap();
        let data = u.tile_data(0).unwrap();
        for r in 0..4 {
            assert_eq!(&data[r * 64..r * 64 + 8], &mem[..]);
        }
    }

    /// T3: rows x colsb loaded, the rest of each row and the rows past `rows` zeroed; TILELOADDT1
    /// gives the identical result.
    fn t3_load_zero_extends<U>(u) {
        u.ldtilecfg(&cfg(0, &[(0, 4, 8), (1, 4, 8)])).unwrap();
        let mem = ramp(4 * 13);
        u.tileloadd(0, &mem, 13).unwrap();
        u.tileloaddt1(1, &mem, 13).unwrap();
        let data = u.tile_data(0).unwrap();
        assert_eq!(u.tile_data(1).unwrap(), data);
        let mut expect = [0u8; 1024];
        for r in 0..4 {
            expect[r * 64..r * 64 + 8].copy_from_slice(&mem[r * 13..r * 13 + 8]);
        }
        assert_eq!(data, expect);
    }

    /// T4 (the part the silicon shows without XRSTOR): start_row 2 loads rows 2..rows only and
    /// resets start_row.
    fn t4_start_row<U>(u) {
        u.ldtilecfg(&cfg(2, &[(0, 6, 8)])).unwrap();
        let mem = ramp(6 * 8);
        u.tileloadd(0, &mem, 8).unwrap();
        assert_eq!(u.sttilecfg()[1], 0);
        let data = u.tile_data(0).unwrap();
        let mut expect = [0u8; 1024];
        for r in 2..6 {
            expect[r * 64..r * 64 + 8].copy_from_slice(&mem[r * 8..r * 8 + 8]);
        }
        assert_eq!(data, expect);
    }

    /// W2: exactly colsb bytes of each row are written, nothing else.
    fn w2_store_exact<U>(u) {
        u.ldtilecfg(&cfg(0, &[(0, 3, 12)])).unwrap();
        let mem = ramp(3 * 12);
        u.tileloadd(0, &mem, 12).unwrap();
        let mut out = [0xCCu8; 320];
        u.tilestored(0, &mut out, 100).unwrap();
        for (i, &byte) in out.iter().enumerate() {
            let (r, c) = (i / 100, i % 100);
            if r < 3 && c < 12 {
                assert_eq!(byte, mem[r * 12 + c], "byte {i}");
            } else {
                assert_eq!(byte, 0xCC, "byte {i} was written");
            }
        }
    }

    /// W3: with start_row 4 on a 6-row tile only rows 4 and 5 are written; start_row is 0 after.
    fn w3_store_start_row<U>(u) {
        u.ldtilecfg(&cfg(4, &[(0, 6, 8)])).unwrap();
        let mut out = [0xCCu8; 48];
        u.tilestored(0, &mut out, 8).unwrap();
        assert_eq!(u.sttilecfg()[1], 0);
        assert!(out[..32].iter().all(|&b| b == 0xCC));
        assert!(out[32..].iter().all(|&b| b == 0));
    }

    /// D1: the dot products' #UD conditions.
    fn d1_dot_ud<U>(u) {
        assert!(is_ud(u.tdpbssd(0, 1, 2)));
        u.ldtilecfg(&cfg(0, &[(0, 16, 64), (1, 16, 64), (2, 16, 64), (3, 8, 64), (4, 16, 32)]))
            .unwrap();
        u.tdpbssd(0, 1, 2).unwrap();
        for (c, a, b) in [(0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 1, 5), (5, 1, 2), (0, 1, 8), (9, 1, 2)] {
            assert!(is_ud(u.tdpbssd(c, a, b)), "{c} {a} {b}");
        }
        assert!(is_ud(u.tdpbssd(3, 1, 2)), "C.rows != A.rows");
        assert!(is_ud(u.tdpbssd(0, 1, 4)), "C.colsb != B.colsb");
        assert!(is_ud(u.tdpbssd(0, 4, 2)), "K: A.colsb / 4 = 8 < B.rows = 16");
        assert!(is_ud(u.tdpbssd(0, 1, 3)), "K: A.colsb / 4 = 16 > B.rows = 8");
        // colsb % 4 != 0 even when the shapes otherwise agree: C 2x6, A 2x8, B 2x6.
        u.ldtilecfg(&cfg(0, &[(0, 2, 6), (1, 2, 8), (2, 2, 6)])).unwrap();
        for r in [
            u.tdpbssd(0, 1, 2),
            u.tdpbsud(0, 1, 2),
            u.tdpbusd(0, 1, 2),
            u.tdpbuud(0, 1, 2),
            u.tdpbf16ps(0, 1, 2),
        ] {
            assert!(is_ud(r));
        }
    }

    /// D1 after a configuration change: operands that passed the checks under one
    /// configuration are checked again under the next one (the emulator remembers the last
    /// product it checked), and after TILERELEASE.
    fn d1_rechecked_after_ldtilecfg<U>(u) {
        u.ldtilecfg(&cfg(0, &[(0, 16, 64), (1, 16, 64), (2, 16, 64)])).unwrap();
        u.tdpbssd(0, 1, 2).unwrap();
        u.tdpbssd(0, 1, 2).unwrap();
        u.ldtilecfg(&cfg(0, &[(0, 8, 64), (1, 16, 64), (2, 16, 64)])).unwrap();
        assert!(is_ud(u.tdpbssd(0, 1, 2)), "C.rows != A.rows under the new configuration");
        u.ldtilecfg(&cfg(0, &[(0, 16, 64), (1, 16, 64), (2, 16, 64)])).unwrap();
        u.tdpbssd(0, 1, 2).unwrap();
        u.tilerelease();
        assert!(is_ud(u.tdpbssd(0, 1, 2)), "unconfigured after TILERELEASE");
        u.ldtilecfg(&[0; 64]).unwrap();
        assert!(is_ud(u.tdpbssd(0, 1, 2)), "unconfigured after LDTILECFG of palette 0");
        // A product whose shape differs from the last one checked computes with its own shape.
        u.ldtilecfg(&cfg(0, &[(0, 2, 8), (1, 2, 4), (2, 1, 8), (3, 16, 64), (4, 16, 64), (5, 16, 64)]))
            .unwrap();
        u.tdpbssd(3, 4, 5).unwrap();
        u.tileloadd(1, &[1u8; 8], 4).unwrap();
        u.tileloadd(2, &[2u8; 8], 8).unwrap();
        u.tdpbssd(0, 1, 2).unwrap();
        let mut out = [0u8; 16];
        u.tilestored(0, &mut out, 8).unwrap();
        assert_eq!(out, [8, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0, 0]);
    }

    /// D3/D4: a dot product with start_row 3 executes and resets start_row (that it computes
    /// every row needs tile data under a non-zero start_row, which only XRSTOR gives: see
    /// `d3_start_row_ignored_emulator`); C bytes past colsb and rows past M are zero; A and B
    /// are unchanged.
    fn d3_d4_dot_rows<U>(u) {
        u.ldtilecfg(&cfg(3, &[(0, 4, 8), (1, 4, 8), (2, 2, 8)])).unwrap();
        let ones = [1u8; 64];
        u.tdpbssd(0, 1, 2).unwrap();
        assert_eq!(u.sttilecfg()[1], 0);
        u.tileloadd(1, &ones, 0).unwrap();
        u.tileloadd(2, &ones, 0).unwrap();
        let (a, b) = (u.tile_data(1).unwrap(), u.tile_data(2).unwrap());
        u.tdpbssd(0, 1, 2).unwrap();
        let c = u.tile_data(0).unwrap();
        for r in 0..16 {
            for col in 0..16 {
                let v = i32::from_le_bytes(c[r * 64 + 4 * col..][..4].try_into().unwrap());
                let expect = if r < 4 && col < 2 { 8 } else { 0 };
                assert_eq!(v, expect, "C[{r}][{col}]");
            }
        }
        assert_eq!(u.tile_data(1).unwrap(), a);
        assert_eq!(u.tile_data(2).unwrap(), b);
    }

    /// Section 9: 32-bit wraparound, and the signedness of each operand, through the instruction.
    fn int8_wraparound<U>(u) {
        u.ldtilecfg(&cfg(0, &[(0, 1, 4), (1, 1, 64), (2, 16, 4)])).unwrap();
        let run = |u: &mut U, c0: u32, a: u8, b: u8, op: fn(&mut U) -> Result<(), Fault>| {
            u.tileloadd(0, &c0.to_le_bytes(), 4).unwrap();
            u.tileloadd(1, &[a; 64], 64).unwrap();
            u.tileloadd(2, &[b; 4], 0).unwrap();
            op(u).unwrap();
            let mut out = [0u8; 4];
            u.tilestored(0, &mut out, 4).unwrap();
            u32::from_le_bytes(out)
        };
        assert_eq!(run(u, 0x7FFF_FFF0, 0x80, 0x80, |u| u.tdpbssd(0, 1, 2)), 0x800F_FFF0);
        assert_eq!(run(u, 0x7FFF_FFF0, 0xFF, 0xFF, |u| u.tdpbuud(0, 1, 2)), 0x803F_8030);
        assert_eq!(run(u, 0x8000_0005, 0x80, 0xFF, |u| u.tdpbsud(0, 1, 2)), 0x7FE0_2005);
        assert_eq!(run(u, 0x8000_0005, 0xFF, 0x80, |u| u.tdpbusd(0, 1, 2)), 0x7FE0_2005);
    }
}

/// T4 with prefilled tile data (XRSTOR on the silicon): rows below start_row keep all 64 bytes.
#[test]
fn t4_rows_below_start_row_kept_emulator() {
    let mut u = Emulator::new();
    u.ldtilecfg(&cfg(0, &[(0, 6, 8)])).unwrap();
    u.set_tile_bytes(0, &[0xAA; 1024]);
    u.set_start_row(2);
    let mem = ramp(48);
    u.tileloadd(0, &mem, 8).unwrap();
    let data = u.tile_data(0).unwrap();
    assert!(data[..128].iter().all(|&b| b == 0xAA));
    for r in 2..6 {
        assert_eq!(&data[r * 64..r * 64 + 8], &mem[r * 8..r * 8 + 8]);
        assert!(data[r * 64 + 8..(r + 1) * 64].iter().all(|&b| b == 0));
    }
    assert!(data[6 * 64..].iter().all(|&b| b == 0));
}

/// T3 with prefilled tile data: bytes past colsb and rows past `rows` are zeroed, other tiles
/// untouched.
#[test]
fn t3_prefilled_emulator() {
    let mut u = Emulator::new();
    u.ldtilecfg(&cfg(0, &[(0, 4, 8), (1, 4, 8)])).unwrap();
    u.set_tile_bytes(0, &[0xAA; 1024]);
    u.set_tile_bytes(1, &[0xAA; 1024]);
    u.tileloadd(0, &ramp(32), 8).unwrap();
    let data = u.tile_data(0).unwrap();
    for r in 0..16 {
        let row = &data[r * 64..(r + 1) * 64];
        let loaded = if r < 4 { 8 } else { 0 };
        assert!(row[loaded..].iter().all(|&b| b == 0), "row {r}");
    }
    assert_eq!(u.tile_data(1).unwrap(), [0xAA; 1024]);
}

/// D3 with prefilled tiles (XRSTOR on the silicon): start_row 3 is ignored, every row of C is
/// computed, and start_row is 0 afterwards.
#[test]
fn d3_start_row_ignored_emulator() {
    let mut u = Emulator::new();
    u.ldtilecfg(&cfg(0, &[(0, 6, 8), (1, 6, 8), (2, 2, 8)]))
        .unwrap();
    u.set_tile_bytes(1, &[1; 1024]);
    u.set_tile_bytes(2, &[2; 1024]);
    u.set_start_row(3);
    u.tdpbssd(0, 1, 2).unwrap();
    assert_eq!(u.sttilecfg()[1], 0);
    let c = u.tile_data(0).unwrap();
    for r in 0..6 {
        for col in 0..2 {
            let v = i32::from_le_bytes(c[r * 64 + 4 * col..][..4].try_into().unwrap());
            assert_eq!(
                v,
                2 * 4 * 2,
                "C[{r}][{col}]: K = 2 dwords of four 1x2 products"
            );
        }
    }
}

/// D2: on a CPU with smaller TMUL limits (reported by CPUID leaf 0x1E), K beyond tmul_maxk and
/// N beyond tmul_maxn are #UD; palette 1 cannot reach them on today's limits.
#[test]
fn d2_tmul_limits_emulator() {
    use amx_runtime::{PaletteTable, TmulLimits};
    // (C, A, B) = (t0 4x32, t1 4x32, t2 8x32): K = 8, N = 32, within both limits;
    // (t3 4x64, t1, t7 8x64): N = 64 bytes; (t0, t4 4x36, t5 9x32): K = 9.
    let image = cfg(
        0,
        &[
            (0, 4, 32),
            (1, 4, 32),
            (2, 8, 32),
            (3, 4, 64),
            (4, 4, 36),
            (5, 9, 32),
            (7, 8, 64),
        ],
    );
    let small = TmulLimits { maxk: 8, maxn: 32 };
    let mut u = Emulator::with_limits(PaletteTable::ARCHITECTURAL, small).unwrap();
    u.ldtilecfg(&image).unwrap();
    u.tdpbssd(0, 1, 2).unwrap();
    assert!(is_ud(u.tdpbssd(3, 1, 7)), "N past tmul_maxn");
    assert!(is_ud(u.tdpbssd(0, 4, 5)), "K past tmul_maxk");
    assert!(is_ud(u.tdpbf16ps(0, 4, 5)), "K past tmul_maxk (bf16)");
    // The same operands on today's limits execute.
    let mut wide = Emulator::new();
    wide.ldtilecfg(&image).unwrap();
    wide.tdpbssd(3, 1, 7).unwrap();
    wide.tdpbssd(0, 4, 5).unwrap();
}

/// D4 with prefilled tiles: bytes of A past K*4 and rows of B past K are ignored.
#[test]
fn d4_ignores_bytes_past_k_emulator() {
    let mut u = Emulator::new();
    u.ldtilecfg(&cfg(0, &[(0, 2, 8), (1, 2, 4), (2, 1, 8)]))
        .unwrap();
    u.set_tile_bytes(1, &[1; 1024]);
    u.set_tile_bytes(2, &[1; 1024]);
    u.tdpbssd(0, 1, 2).unwrap();
    let c = u.tile_data(0).unwrap();
    for r in 0..2 {
        for col in 0..2 {
            let v = i32::from_le_bytes(c[r * 64 + 4 * col..][..4].try_into().unwrap());
            assert_eq!(v, 4, "K = 1: one dword of four 1x1 products");
        }
    }
}
