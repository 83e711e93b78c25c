//! The statements of docs/semantics.md sections 15-19 (AMX-FP8, AMX-COMPLEX, AMX-AVX512,
//! AMX-MOVRS), each run on the emulator everywhere, and on the silicon code path where it
//! runs (the silicon, or the trap engine on x86-64 Linux without AMX). There a CPU that does not
//! report an instruction's feature must refuse it with `Fault::InvalidOpcode` naming that
//! feature (N2), and the statement is checked where it does.

use amx_runtime::rules::image;
use amx_runtime::{Emulator, Fault, Feature, Mnemonic, TileShape, TileUnit, UdReason};

/// Generates `emulator` and `hardware` tests from one body generic over the tile unit; on the
/// silicon path the body runs only where `$feature` (a `Capabilities` field) is reported, and
/// otherwise every instruction of `$refused` must be refused for want of `$why`.
macro_rules! on_both {
    ($($(#[$doc:meta])* fn $name:ident<$u:ident>($unit:ident) needs $feature:ident $why:expr, $refused:expr; $body:block)*) => {$(
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
                let Some(mut hw) = amx_test_support::needs::silicon() else {
                    return;
                };
                let caps = amx_runtime::detect();
                let has = caps.$feature && (stringify!($feature) != "amx_avx512" || caps.zmm_enabled());
                if has {
                    run(&mut hw);
                } else {
                    refused(&mut hw, $refused, $why);
                }
                hw.tilerelease();
            }
        }
    )*};
}

/// The instructions of one feature, each run on a configuration that makes it legal.
type Attempt = fn(&mut dyn TileUnit) -> Result<(), Fault>;

/// N2: without its feature every instruction is #UD naming the feature, even on operands that
/// fit, and nothing changes.
fn refused(u: &mut dyn TileUnit, attempts: &[(Mnemonic, Attempt)], why: Feature) {
    u.ldtilecfg(&full()).unwrap();
    u.tileloadd(1, &ramp(1024), 64).unwrap();
    let before = u.tile_data(1).unwrap();
    for (mnemonic, attempt) in attempts {
        match attempt(u) {
            Err(Fault::InvalidOpcode(ud)) => {
                assert_eq!(ud.instruction(), *mnemonic);
                assert_eq!(ud.reason(), UdReason::MissingFeature(why), "{mnemonic}");
            }
            other => panic!("{mnemonic} on a CPU without {why}: {other:?}"),
        }
    }
    assert_eq!(u.tile_data(1).unwrap(), before);
}

/// A palette-1 image with the given (tile, rows, colsb) and start_row.
fn cfg(start_row: u8, tiles: &[(usize, u8, u16)]) -> [u8; 64] {
    let mut shapes = [None; 8];
    for &(t, rows, colsb) in tiles {
        shapes[t] = Some(TileShape::new(rows, colsb));
    }
    image::encode(1, start_row, &shapes)
}

fn full() -> [u8; 64] {
    cfg(0, &(0..8).map(|t| (t, 16, 64)).collect::<Vec<_>>())
}

fn ramp(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + 3) as u8).collect()
}

fn ud_reason(r: Result<(), Fault>) -> UdReason {
    match r {
        Err(Fault::InvalidOpcode(ud)) => ud.reason(),
        other => panic!("not #UD: {other:?}"),
    }
}

/// A tile whose every byte is `byte`.
fn filled(byte: u8) -> Vec<u8> {
    vec![byte; 1024]
}

fn dword(tile: &[u8; 1024], row: usize, col: usize) -> u32 {
    let i = row * 64 + col * 4;
    u32::from_le_bytes([tile[i], tile[i + 1], tile[i + 2], tile[i + 3]])
}

const MOVRS: &[(Mnemonic, Attempt)] = &[
    (Mnemonic::Tileloaddrs, |u| u.tileloaddrs(2, &[0; 1024], 64)),
    (Mnemonic::Tileloaddrst1, |u| {
        u.tileloaddrst1(2, &[0; 1024], 64)
    }),
];

const FP8: &[(Mnemonic, Attempt)] = &[
    (Mnemonic::Tdpbf8ps, |u| u.tdpbf8ps(0, 1, 2)),
    (Mnemonic::Tdpbhf8ps, |u| u.tdpbhf8ps(0, 1, 2)),
    (Mnemonic::Tdphbf8ps, |u| u.tdphbf8ps(0, 1, 2)),
    (Mnemonic::Tdphf8ps, |u| u.tdphf8ps(0, 1, 2)),
];

const COMPLEX: &[(Mnemonic, Attempt)] = &[
    (Mnemonic::Tcmmimfp16ps, |u| u.tcmmimfp16ps(0, 1, 2)),
    (Mnemonic::Tcmmrlfp16ps, |u| u.tcmmrlfp16ps(0, 1, 2)),
];

const ROWS: &[(Mnemonic, Attempt)] = &[
    (Mnemonic::Tilemovrow, |u| u.tilemovrow(1, 0).map(drop)),
    (Mnemonic::Tcvtrowd2ps, |u| u.tcvtrowd2ps(1, 0).map(drop)),
    (Mnemonic::Tcvtrowps2bf16h, |u| {
        u.tcvtrowps2bf16h(1, 0).map(drop)
    }),
    (Mnemonic::Tcvtrowps2bf16l, |u| {
        u.tcvtrowps2bf16l(1, 0).map(drop)
    }),
    (Mnemonic::Tcvtrowps2phh, |u| u.tcvtrowps2phh(1, 0).map(drop)),
    (Mnemonic::Tcvtrowps2phl, |u| u.tcvtrowps2phl(1, 0).map(drop)),
];

on_both! {
    /// M1: TILELOADDRS and TILELOADDRST1 load exactly as TILELOADD does: the same #UD
    /// conditions, rows below start_row kept, bytes past colsb and rows past the tile's zeroed,
    /// start_row cleared.
    fn m1_read_shared_loads_are_tileloadd<U>(u) needs amx_movrs Feature::AmxMovrs, MOVRS; {
        let mem = ramp(16 * 100);
        u.ldtilecfg(&cfg(2, &[(0, 5, 12), (1, 5, 12)])).unwrap();
        u.tileloadd(0, &filled(0xAB), 64).unwrap();
        u.tileloadd(1, &filled(0xAB), 64).unwrap();
        u.ldtilecfg(&cfg(2, &[(0, 5, 12), (1, 5, 12)])).unwrap();
        u.tileloadd(0, &mem, 100).unwrap();
        assert_eq!(u.sttilecfg()[1], 0);
        let want = u.tile_data(0).unwrap();
        for t1 in [false, true] {
            u.ldtilecfg(&cfg(2, &[(0, 5, 12), (1, 5, 12)])).unwrap();
            let r = if t1 { u.tileloaddrst1(1, &mem, 100) } else { u.tileloaddrs(1, &mem, 100) };
            r.unwrap();
            assert_eq!(u.tile_data(1).unwrap(), want, "t1 = {t1}");
            assert_eq!(u.sttilecfg()[1], 0);
        }
        // The #UD conditions of TILELOADD (T1).
        u.ldtilecfg(&cfg(0, &[(0, 4, 6), (1, 4, 8)])).unwrap();
        assert!(matches!(ud_reason(u.tileloaddrs(0, &mem, 8)), UdReason::ColsbNotMultipleOf4 { .. }));
        assert_eq!(ud_reason(u.tileloaddrst1(2, &mem, 8)), UdReason::Unused { tile: 2 });
        u.tilerelease();
        assert_eq!(ud_reason(u.tileloaddrs(1, &mem, 8)), UdReason::NotConfigured);
        // A slice too short is refused, as for TILELOADD.
        u.ldtilecfg(&cfg(0, &[(1, 4, 8)])).unwrap();
        assert!(matches!(u.tileloaddrs(1, &mem[..30], 8), Err(Fault::OutOfBounds { .. })));
    }

    /// N1: the AMX-FP8 products have the operand rules of every dot product (D1): aliasing, unused tiles, and each shape mismatch are #UD, and nothing changes.
    fn n1_products_share_the_operand_rules<U>(u) needs amx_fp8 Feature::AmxFp8, FP8; {
        u.ldtilecfg(&cfg(0, &[(0, 4, 16), (1, 4, 8), (2, 2, 16), (3, 4, 12)])).unwrap();
        let fp8: [Attempt; 4] = [
            |u| u.tdpbf8ps(0, 1, 2),
            |u| u.tdpbhf8ps(0, 1, 2),
            |u| u.tdphbf8ps(0, 1, 2),
            |u| u.tdphf8ps(0, 1, 2),
        ];
        for product in fp8 {
            product(u).unwrap();
        }
        let misfits: [Attempt; 5] = [
            |u| u.tdpbf8ps(0, 0, 2),
            |u| u.tdphf8ps(0, 1, 5),
            |u| u.tdpbhf8ps(3, 1, 2),
            |u| u.tdphbf8ps(0, 3, 2),
            |u| u.tdpbf8ps(2, 1, 0),
        ];
        let before: Vec<_> = (0..4).map(|t| u.tile_data(t).unwrap()).collect();
        for misfit in misfits {
            assert!(matches!(ud_reason(misfit(u)), UdReason::DotOperands(_)));
        }
        let after: Vec<_> = (0..4).map(|t| u.tile_data(t).unwrap()).collect();
        assert_eq!(before, after);
    }

    /// F8-2, F8-3: TDPHF8PS of all-ones (hf8 0x38) over K dwords adds 4K to C; the four products of a
    /// dword count once each; C past N and rows past M are zeroed (D4); start_row is cleared.
    fn f8_1_ones_add_four_per_dword<U>(u) needs amx_fp8 Feature::AmxFp8, FP8; {
        // A product right after a LDTILECFG with start_row 3 clears it (D3).
        u.ldtilecfg(&cfg(3, &[(0, 4, 12), (1, 4, 20), (2, 5, 12)])).unwrap();
        u.tdphf8ps(0, 1, 2).unwrap();
        assert_eq!(u.sttilecfg()[1], 0);
        let one = 1f32.to_le_bytes();
        let c: Vec<u8> = (0..1024).map(|i| one[i % 4]).collect();
        u.tileloadd(0, &c, 64).unwrap();
        u.tileloadd(1, &filled(0x38), 64).unwrap();
        u.tileloadd(2, &filled(0x38), 64).unwrap();
        u.tdphf8ps(0, 1, 2).unwrap();
        let out = u.tile_data(0).unwrap();
        for r in 0..16 {
            for n in 0..16 {
                let want = if r < 4 && n < 3 { 1.0 + 4.0 * 5.0 } else { 0.0 };
                assert_eq!(f32::from_bits(dword(&out, r, n)), want, "{r},{n}");
            }
        }
        assert_eq!(u.sttilecfg()[1], 0);
    }

    /// F8-1: the formats are each operand's own: bf8 0x3C and hf8 0x38 are both 1.0, bf8 0x38
    /// is 0.5 and hf8 0x3C is 1.5.
    fn f8_2_each_operand_has_its_format<U>(u) needs amx_fp8 Feature::AmxFp8, FP8; {
        u.ldtilecfg(&cfg(0, &[(0, 1, 4), (1, 1, 4), (2, 1, 4)])).unwrap();
        let run = |u: &mut U, a: u8, b: u8, f: Attempt| -> f32 {
            u.tilezero(0).unwrap();
            u.tileloadd(1, &[a, 0, 0, 0], 4).unwrap();
            u.tileloadd(2, &[b, 0, 0, 0], 4).unwrap();
            f(u).unwrap();
            f32::from_bits(dword(&u.tile_data(0).unwrap(), 0, 0))
        };
        assert_eq!(run(u, 0x3C, 0x38, |u| u.tdpbf8ps(0, 1, 2)), 0.5);
        assert_eq!(run(u, 0x3C, 0x38, |u| u.tdpbhf8ps(0, 1, 2)), 1.0);
        assert_eq!(run(u, 0x3C, 0x38, |u| u.tdphbf8ps(0, 1, 2)), 0.75);
        assert_eq!(run(u, 0x3C, 0x38, |u| u.tdphf8ps(0, 1, 2)), 1.5);
    }

    /// C1, C2: TCMMRLFP16PS and TCMMIMFP16PS give the real and imaginary parts of complex
    /// products: (1 + 2i)(3 + 4i) + (0.5 - i)(2 + 2i) = (-5 + 10i) + (3 - i) = -2 + 9i.
    fn c1_complex_products<U>(u) needs amx_complex Feature::AmxComplex, COMPLEX; {
        let h = |x: f32| half::f16::from_f32(x).to_bits().to_le_bytes();
        let complex = |re: f32, im: f32| [h(re), h(im)].concat();
        u.ldtilecfg(&cfg(0, &[(0, 1, 4), (1, 1, 8), (2, 2, 4), (3, 1, 4)])).unwrap();
        u.tileloadd(1, &[complex(1.0, 2.0), complex(0.5, -1.0)].concat(), 8).unwrap();
        u.tileloadd(2, &[complex(3.0, 4.0), complex(2.0, 2.0)].concat(), 4).unwrap();
        u.tilezero(0).unwrap();
        u.tilezero(3).unwrap();
        u.tcmmrlfp16ps(0, 1, 2).unwrap();
        u.tcmmimfp16ps(3, 1, 2).unwrap();
        assert_eq!(f32::from_bits(dword(&u.tile_data(0).unwrap(), 0, 0)), -2.0);
        assert_eq!(f32::from_bits(dword(&u.tile_data(3).unwrap(), 0, 0)), 9.0);
        assert!(matches!(ud_reason(u.tcmmimfp16ps(0, 0, 2)), UdReason::DotOperands(_)));
    }

    /// R1-R6: a row move reads row `row & 0xFFFF`, chunk `row >> 16` (R2); a row at or past
    /// the tile's rows gives zeros (R3), and so does every chunk but 0; dwords past colsb are
    /// zero (R4); start_row is cleared (R6); unconfigured, unused and colsb % 4 != 0 are #UD
    /// (R1).
    fn r1_r4_row_moves<U>(u) needs amx_avx512 Feature::AmxAvx512, ROWS; {
        let mem = ramp(1024);
        // Right after a LDTILECFG with start_row 2: the row reads the zeroed tile, and the
        // move clears start_row.
        u.ldtilecfg(&cfg(2, &[(1, 5, 24), (2, 3, 6)])).unwrap();
        assert_eq!(u.tilemovrow(1, 0).unwrap(), [0; 64]);
        assert_eq!(u.sttilecfg()[1], 0);
        u.tileloadd(1, &mem, 64).unwrap();
        let row = u.tilemovrow(1, 3).unwrap();
        assert_eq!(&row[..24], &mem[3 * 64..3 * 64 + 24]);
        assert_eq!(row[24..], [0; 40]);
        assert_eq!(u.tilemovrow(1, 0x1_0003).unwrap(), [0; 64]); // chunk 1
        assert_eq!(u.tilemovrow(1, 0x13).unwrap(), [0; 64]); // row 19
        assert_eq!(u.tilemovrow(1, 5).unwrap(), [0; 64]);
        assert_eq!(u.tcvtrowd2ps(1, 15).unwrap(), [0; 64]);
        assert!(matches!(ud_reason(u.tilemovrow(2, 0).map(drop)), UdReason::ColsbNotMultipleOf4 { .. }));
        assert_eq!(ud_reason(u.tcvtrowps2phl(3, 0).map(drop)), UdReason::Unused { tile: 3 });
        u.tilerelease();
        assert_eq!(ud_reason(u.tcvtrowps2bf16h(1, 0).map(drop)), UdReason::NotConfigured);
    }

    /// R5: the conversions, each into its half of the dword: int32 to fp32, fp32 to bf16 and
    /// to fp16, all rounding to nearest even.
    fn r5_row_conversions<U>(u) needs amx_avx512 Feature::AmxAvx512, ROWS; {
        u.ldtilecfg(&cfg(0, &[(0, 1, 16), (1, 1, 16)])).unwrap();
        let ints: Vec<u8> = [1i32, -3, (1 << 24) + 1, (1 << 24) + 3]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        u.tileloadd(0, &ints, 16).unwrap();
        let f = u.tcvtrowd2ps(0, 0).unwrap();
        let want: Vec<u8> = [1f32, -3.0, 16_777_216.0, 16_777_220.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(&f[..16], &want[..]);
        // 1 + 2^-11 is the tie between two fp16 values: to even.
        let floats: Vec<u8> = [1.0f32, -2.5, 1.0 + 2f32.powi(-11), 65520.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        u.tileloadd(1, &floats, 16).unwrap();
        let half = |bytes: [u8; 64], i: usize| u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]);
        let bh = u.tcvtrowps2bf16h(1, 0).unwrap();
        let bl = u.tcvtrowps2bf16l(1, 0).unwrap();
        let ph = u.tcvtrowps2phh(1, 0).unwrap();
        let pl = u.tcvtrowps2phl(1, 0).unwrap();
        for (i, (bf, fp)) in [(0x3F80, 0x3C00), (0xC020, 0xC100), (0x3F80, 0x3C00), (0x4780, 0x7C00)]
            .into_iter()
            .enumerate()
        {
            assert_eq!((half(bh, 2 * i), half(bh, 2 * i + 1)), (0, bf), "bf16h {i}");
            assert_eq!((half(bl, 2 * i), half(bl, 2 * i + 1)), (bf, 0), "bf16l {i}");
            assert_eq!((half(ph, 2 * i), half(ph, 2 * i + 1)), (0, fp), "phh {i}");
            assert_eq!((half(pl, 2 * i), half(pl, 2 * i + 1)), (fp, 0), "phl {i}");
        }
    }

    /// F8-4, F8-5: FP8 denormals are values (the smallest bf8, 2^-16, squared is 2^-32; the
    /// smallest hf8 times 1 is 2^-9), an FP8 NaN reaches C as the fp32 NaN of F8-5, made quiet,
    /// and BF8 infinity times zero is the default NaN.
    fn f8_4_denormals_and_nans<U>(u) needs amx_fp8 Feature::AmxFp8, FP8; {
        u.ldtilecfg(&cfg(0, &[(0, 1, 4), (1, 1, 4), (2, 1, 4)])).unwrap();
        let run = |u: &mut U, a: [u8; 4], b: [u8; 4], f: Attempt| -> u32 {
            u.tilezero(0).unwrap();
            u.tileloadd(1, &a, 4).unwrap();
            u.tileloadd(2, &b, 4).unwrap();
            f(u).unwrap();
            dword(&u.tile_data(0).unwrap(), 0, 0)
        };
        let bf8: Attempt = |u| u.tdpbf8ps(0, 1, 2);
        let hf8: Attempt = |u| u.tdphf8ps(0, 1, 2);
        let mixed: Attempt = |u| u.tdphbf8ps(0, 1, 2);
        assert_eq!(run(u, [1, 0, 0, 0], [1, 0, 0, 0], bf8), 2f32.powi(-32).to_bits());
        assert_eq!(run(u, [0, 1, 0, 0], [0, 0x38, 0, 0], hf8), 2f32.powi(-9).to_bits());
        // hf8 A (the smallest denormal) x bf8 B (1.0 = 0x3C).
        assert_eq!(run(u, [0, 0, 1, 0], [0, 0, 0x3C, 0], mixed), 2f32.powi(-9).to_bits());
        // The hf8 NaN (0xFF: negative) and a bf8 NaN with fraction 01 (quieted).
        assert_eq!(run(u, [0xFF, 0, 0, 0], [0x38, 0, 0, 0], hf8), 0xFFF0_0000);
        assert_eq!(run(u, [0x7D, 0, 0, 0], [0x3C, 0, 0, 0], bf8), 0x7FE0_0000);
        assert_eq!(run(u, [0x7C, 0, 0, 0], [0, 0, 0, 0], bf8), 0xFFC0_0000);
    }

    /// C3: TCMMRLFP16PS negates A's imaginary element, so a NaN there reaches C with its sign
    /// flipped; TCMMIMFP16PS passes it unchanged.
    fn c3_the_negation_is_of_the_element<U>(u) needs amx_complex Feature::AmxComplex, COMPLEX; {
        u.ldtilecfg(&cfg(0, &[(0, 1, 4), (1, 1, 4), (2, 1, 4)])).unwrap();
        let one = u32::from(half::f16::from_f32(1.0).to_bits());
        // A = 1 + NaN i (the fp16 quiet NaN 0x7E01), B = 1 + 1i.
        let a = (one | 0x7E01 << 16).to_le_bytes();
        let b = (one | one << 16).to_le_bytes();
        u.tileloadd(1, &a, 4).unwrap();
        u.tileloadd(2, &b, 4).unwrap();
        u.tilezero(0).unwrap();
        u.tcmmrlfp16ps(0, 1, 2).unwrap();
        assert_eq!(dword(&u.tile_data(0).unwrap(), 0, 0), 0xFFC0_2000);
        u.tilezero(0).unwrap();
        u.tcmmimfp16ps(0, 1, 2).unwrap();
        assert_eq!(dword(&u.tile_data(0).unwrap(), 0, 0), 0x7FC0_2000);
    }

    /// R3, R6: a row number at or past the tile's rows (16 and more included) gives zeros and
    /// still clears start_row; the conversions give zeros there too.
    fn r3_r6_rows_past_the_tile<U>(u) needs amx_avx512 Feature::AmxAvx512, ROWS; {
        u.ldtilecfg(&cfg(0, &[(1, 4, 64)])).unwrap();
        u.tileloadd(1, &ramp(1024), 64).unwrap();
        assert_eq!(u.tilemovrow(1, 3).unwrap()[..], ramp(1024)[3 * 64..4 * 64]);
        for row in [4, 15, 16, 0xFFFF] {
            assert_eq!(u.tilemovrow(1, row).unwrap(), [0; 64], "row {row}");
            assert_eq!(u.tcvtrowps2phl(1, row).unwrap(), [0; 64], "row {row}");
        }
        // A row past the tile still clears start_row.
        u.ldtilecfg(&cfg(3, &[(1, 4, 64)])).unwrap();
        assert_eq!(u.tilemovrow(1, 16).unwrap(), [0; 64]);
        assert_eq!(u.sttilecfg()[1], 0);
    }
}
