//! Kernels written with typed tiles run, on the process's backend, and compute what the untyped
//! instructions compute; handles carry their shapes as constants.

use amx_runtime::typed::Handle;
use amx_runtime::{tilecfg, Emulator, TileUnit};
// Every backend usable here (the typed path differs: unchecked instructions on the silicon).
use amx_test_support::needs::backends;

tilecfg! {
    /// An int8 block: C (16x16 i32) += A (16x64 i8) x B (16x64 i8, 16 k-groups of 4).
    pub struct Int8Block;
    palette 1;
    t0 as c: 16x16 i32;
    t4 as a: 16x64 i8;
    t6 as b: 16x64 i8;
}

tilecfg! {
    /// A bf16 block with an edge: C (7x12 f32) += A (7x32 bf16) x B (16x24 bf16 pairs).
    struct Bf16Edge;
    palette 1;
    t1 as acc: 7x12 f32;
    t2 as lhs: 7x32 bf16;
    t3 as rhs: 16x24 bf16;
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    amx_test_support::SplitMix64::new(seed).bytes(len)
}

#[test]
fn handles_carry_their_shapes() {
    assert_eq!(
        (<Int8Block as amx_runtime::typed::Layout>::CONFIG.tile(4)),
        Some(amx_runtime::TileShape::new(16, 64))
    );
    fn shape<H: Handle>(_: H) -> (u8, u8, u16) {
        (H::INDEX, H::ROWS, H::COLSB)
    }
    assert_eq!(shape(Int8Block::c), (0, 16, 64));
    assert_eq!(shape(Bf16Edge::rhs), (3, 16, 48));
}

#[test]
fn int8_typed_kernel_matches_the_reference() {
    let a: Vec<i8> = amx_test_support::random(16 * 64, 1);
    let b: Vec<i8> = amx_test_support::random(16 * 64, 2);
    let mut c = vec![5i32; 16 * 16];
    let mut tiles = Int8Block::configure().unwrap();
    tiles.load(Int8Block::c, &c, 16).unwrap();
    tiles.load(Int8Block::a, &a, 64).unwrap();
    tiles.load(Int8Block::b, &b, 64).unwrap();
    tiles.tdpbssd(Int8Block::c, Int8Block::a, Int8Block::b);
    tiles.store(Int8Block::c, &mut c, 16).unwrap();
    for m in 0..16 {
        for n in 0..16 {
            let mut expect = 5i32;
            for k in 0..64 {
                expect += a[m * 64 + k] as i32 * b[(k / 4) * 64 + 4 * n + k % 4] as i32;
            }
            assert_eq!(c[m * 16 + n], expect, "C[{m}][{n}]");
        }
    }
}

#[test]
fn bf16_typed_kernel_matches_the_untyped_instruction() {
    let a = pattern(7 * 64, 3);
    let b = pattern(16 * 48, 4);
    let as_bf16 = |bytes: &[u8]| -> Vec<amx_runtime::bf16> {
        bytes
            .chunks(2)
            .map(|p| amx_runtime::bf16::from_le_bytes([p[0], p[1]]))
            .collect()
    };
    let mut typed_out = vec![0f32; 7 * 12];
    let typed_tile = {
        let mut tiles = Bf16Edge::configure().unwrap();
        tiles.zero(Bf16Edge::acc);
        tiles.load(Bf16Edge::lhs, &as_bf16(&a), 32).unwrap();
        tiles.load(Bf16Edge::rhs, &as_bf16(&b), 24).unwrap();
        tiles.tdpbf16ps(Bf16Edge::acc, Bf16Edge::lhs, Bf16Edge::rhs);
        tiles.store(Bf16Edge::acc, &mut typed_out, 12).unwrap();
        tiles.read(Bf16Edge::acc).unwrap()
    };
    let mut emu = Emulator::new();
    emu.ldtilecfg(Bf16Edge::CONFIG.as_bytes()).unwrap();
    emu.tileloadd(2, &a, 64).unwrap();
    emu.tileloadd(3, &b, 48).unwrap();
    emu.tdpbf16ps(1, 2, 3).unwrap();
    let mut bytes = vec![0u8; 7 * 48];
    emu.tilestored(1, &mut bytes, 48).unwrap();
    let untyped: Vec<u32> = bytes
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let typed: Vec<u32> = typed_out.iter().map(|f| f.to_bits()).collect();
    assert_eq!(typed, untyped);
    // All 1024 bytes, the zeroed rows past M and bytes past N included (typed dot products
    // on the emulator skip the shape checks, not the zeroing).
    assert_eq!(typed_tile, emu.tile_data(1).unwrap());
}

tilecfg! {
    struct OneRow;
    palette 1;
    t0 as row: 1x16 i32;
}

#[test]
fn a_one_row_tile_ignores_the_stride() {
    let mut tiles = OneRow::configure().unwrap();
    let src: Vec<i32> = (0..16).collect();
    tiles.load(OneRow::row, &src, usize::MAX).unwrap();
    let mut out = vec![0i32; 16];
    tiles.store(OneRow::row, &mut out, usize::MAX).unwrap();
    assert_eq!(out, src);
}

#[test]
fn typed_loads_check_bounds() {
    let mut tiles = Int8Block::configure().unwrap();
    let short = vec![0i8; 15 * 64 + 63];
    let err = tiles.load(Int8Block::a, &short, 64).unwrap_err();
    assert_eq!(
        err,
        amx_runtime::Fault::OutOfBounds {
            tile: 4,
            needed: 1024,
            len: 1023
        }
    );
    let mut out = vec![0i32; 16 * 16];
    assert!(tiles.store(Int8Block::c, &mut out, usize::MAX).is_err());
    // Counted in the caller's elements: 15 rows of 16 i32 apart, then one row of 16.
    let mut short = vec![0i32; 16 * 16 - 1];
    assert_eq!(
        tiles.store(Int8Block::c, &mut short, 16),
        Err(amx_runtime::Fault::OutOfBounds {
            tile: 0,
            needed: 256,
            len: 255
        })
    );
    // A stride shorter than a row is accepted: the rows overlap, the last one written wins.
    let src: Vec<i32> = (0..16 * 16).collect();
    tiles.load(Int8Block::c, &src, 16).unwrap();
    let mut overlapped = vec![0i32; 15 + 16];
    tiles.store(Int8Block::c, &mut overlapped, 1).unwrap();
    assert_eq!(overlapped[0], 0);
    assert_eq!(&overlapped[15..], &src[15 * 16..]);
}

tilecfg! {
    /// Two rows of 32 bytes: small enough that a taller configuration loaded behind the guard
    /// would store far past a buffer sized for it.
    struct Small;
    palette 1;
    t0 as c: 2x8 i32;
    t4 as a: 2x16 i8;
    t6 as b: 4x32 i8;
}

/// Runs `f` on a fresh thread (a panic there leaves this test's thread and its guard slot
/// alone) and returns whether it panicked, with the message.
fn panics(f: impl FnOnce() + Send + 'static) -> Option<String> {
    let out = std::thread::spawn(f).join().err()?;
    Some(
        out.downcast_ref::<String>()
            .cloned()
            .or_else(|| out.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    )
}

#[test]
fn a_configuration_changed_behind_typed_tiles_stops_them_before_memory_is_touched() {
    static TALL: amx_runtime::TileConfig = tilecfg! { palette 1; t0: 16x64 };
    for backend in backends() {
        let msg = panics(move || {
            let mut tiles = amx_runtime::configure_typed_on::<Small>(backend).unwrap();
            tiles.untyped().ldtilecfg(TALL.as_bytes()).unwrap();
            // 2 rows of 8 i32 at stride 8 fit these 16 i32; with TALL loaded an unchecked
            // TILESTORED would write 16 rows of 64 bytes from here.
            let mut buf = vec![0x5555_5555i32; 16 + 256];
            let (dst, rest) = buf.split_at_mut(16);
            let _ = tiles.store(Small::c, dst, 8);
            assert!(
                rest.iter().all(|&x| x == 0x5555_5555),
                "wrote past the slice"
            );
        })
        .unwrap_or_else(|| panic!("{backend}: the typed store ran on a foreign configuration"));
        assert!(msg.contains("changed behind its guard"), "{backend}: {msg}");
        // The way out it names is one that works (configuring again is Busy under the guard).
        assert!(msg.contains("untyped().reconfigure(&"), "{backend}: {msg}");
    }
}

#[test]
fn typed_tiles_refuse_to_run_on_released_tiles() {
    for backend in backends() {
        let msg = panics(move || {
            let mut tiles = amx_runtime::configure_typed_on::<Small>(backend).unwrap();
            tiles.untyped().tilerelease();
            tiles.zero(Small::c);
        })
        .unwrap_or_else(|| panic!("{backend}: TILEZERO ran on released tiles"));
        assert!(msg.contains("Small"), "{backend}: {msg}");
    }
}

#[test]
fn reloading_the_same_configuration_behind_typed_tiles_is_accepted() {
    for backend in backends() {
        let mut tiles = amx_runtime::configure_typed_on::<Small>(backend).unwrap();
        let config = *<Small as amx_runtime::typed::Layout>::CONFIG.as_bytes();
        tiles.untyped().ldtilecfg(&config).unwrap();
        let a: Vec<i8> = (0..32).collect();
        let b = vec![1i8; 4 * 32];
        tiles.zero(Small::c);
        tiles.load(Small::a, &a, 16).unwrap();
        tiles.load(Small::b, &b, 32).unwrap();
        tiles.tdpbssd(Small::c, Small::a, Small::b);
        let mut c = vec![0i32; 16];
        tiles.store(Small::c, &mut c, 8).unwrap();
        // B is all ones, so every column of C's row r sums A's row r (16 bytes).
        let row = |r: i32| (0..16).map(|i| r * 16 + i).sum::<i32>();
        assert_eq!(c[..8], [row(0); 8], "{backend}");
        assert_eq!(c[8..], [row(1); 8], "{backend}");
    }
}

#[test]
fn another_hardware_handle_changing_the_configuration_is_noticed() {
    use amx_runtime::Hardware;
    if amx_test_support::needs::silicon().is_none() {
        return;
    }
    let msg = panics(|| {
        let mut tiles =
            amx_runtime::configure_typed_on::<Small>(amx_runtime::Backend::Hardware).unwrap();
        Hardware::new().unwrap().tilerelease();
        tiles.zero(Small::c); // unchecked TILEZERO here would be SIGILL
    })
    .expect("TILEZERO ran after another handle released the tiles");
    assert!(msg.contains("changed behind its guard"), "{msg}");
}

/// An emulator modelling a CPU with smaller TMUL limits: the typed layer, whose dot products
/// return no `Result`, is refused at configure with a typed error (it used to reach a dot
/// product the emulator rejects, and panic).
#[test]
fn typed_tiles_are_refused_on_an_emulator_with_small_tmul_limits() {
    use amx_runtime::{
        configure_typed_on, set_thread_emulator, Backend, ConfigureError, PaletteTable, TmulLimits,
    };
    std::thread::spawn(|| {
        let small = TmulLimits { maxk: 8, maxn: 32 };
        set_thread_emulator(Emulator::with_limits(PaletteTable::ARCHITECTURAL, small).unwrap())
            .unwrap();
        match configure_typed_on::<Int8Block>(Backend::Emulated) {
            Err(ConfigureError::Unsupported(why)) => {
                assert!(why.to_string().contains("tmul_maxk 8"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        set_thread_emulator(Emulator::new()).unwrap();
        let mut tiles = configure_typed_on::<Int8Block>(Backend::Emulated).unwrap();
        tiles.tdpbssd(Int8Block::c, Int8Block::a, Int8Block::b);
        // A guard is alive: the emulator cannot be swapped under it.
        assert_eq!(
            set_thread_emulator(Emulator::new()),
            Err(ConfigureError::Busy)
        );
    })
    .join()
    .unwrap();
}

/// TILELOADDT1 through typed tiles loads what TILELOADD loads (only the cache hint differs),
/// on every backend usable here, with a stride larger than a row.
#[test]
fn stream_loads_load_what_loads_load() {
    let src = pattern(16 * 80, 9);
    let mut plain = [0u8; 1024];
    let mut streamed = [0u8; 1024];
    let mut tiles = Int8Block::configure().unwrap();
    // SAFETY: 16 rows of 64 bytes at stride 80 lie inside `src` (15 * 80 + 64 <= 1280), and
    // each store's 16 rows of 64 bytes at stride 64 fill its 1024-byte buffer exactly.
    unsafe {
        tiles.load_ptr(Int8Block::a, src.as_ptr(), 80);
        tiles.store_ptr(Int8Block::a, plain.as_mut_ptr(), 64);
        tiles.zero(Int8Block::a);
        tiles.stream_load_ptr(Int8Block::a, src.as_ptr(), 80);
        tiles.store_ptr(Int8Block::a, streamed.as_mut_ptr(), 64);
    }
    assert_eq!(plain, streamed);
    for r in 0..16 {
        assert_eq!(&plain[r * 64..r * 64 + 64], &src[r * 80..r * 80 + 64]);
    }
}

tilecfg! {
    /// The AMX-FP8, AMX-COMPLEX and AMX-AVX512 operands: C (4x8 f32) += A (4x12) x B (3x32),
    /// A and B in either FP8 format; complex f16 tiles; an i32 tile for the row conversions.
    struct NextGen;
    palette 1;
    t0 as c: 4x8 f32;
    t1 as ab: 4x12 bf8;
    t2 as ah: 4x12 hf8;
    t3 as bb: 3x32 bf8;
    t4 as bh: 3x32 hf8;
    t5 as za: 4x2 f16;
    t6 as zb: 1x16 f16;
    t7 as ints: 4x8 i32;
}

/// One of the typed FP8 products on `NextGen`'s tiles.
type Product = fn(&mut amx_runtime::typed::TypedTiles<NextGen>);

/// The typed FP8 products on the emulator against a scalar model of their own: the operands
/// are small multiples of powers of two, so every sum is exact and the result is the exact dot
/// product whatever the order of the additions.
#[test]
fn typed_fp8_products_compute_the_dot_product() {
    use amx_runtime::{configure_typed_on, set_thread_emulator, Backend, Bf8, Hf8};
    std::thread::spawn(|| {
        set_thread_emulator(Emulator::new()).unwrap();
        let mut tiles = configure_typed_on::<NextGen>(Backend::Emulated).unwrap();
        // Values in {-2, -1, -0.5, 0, 0.5, 1, 2}: exact in both formats.
        let vals = [-2.0f32, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0];
        let mut rng = amx_test_support::SplitMix64::new(33);
        let mut pick = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| vals[(rng.next_u64() % 7) as usize])
                .collect()
        };
        // A: 4 rows of 12 values (K = 3 dwords); B: 3 rows of 32 values (8 columns x 4).
        let (a, b) = (pick(4 * 12), pick(3 * 32));
        let want: Vec<f32> = (0..4 * 8)
            .map(|i| {
                let (m, n) = (i / 8, i % 8);
                (0..3)
                    .flat_map(|k| (0..4).map(move |j| (k, j)))
                    .map(|(k, j)| {
                        f64::from(a[m * 12 + 4 * k + j]) * f64::from(b[k * 32 + 4 * n + j])
                    })
                    .sum::<f64>() as f32
            })
            .collect();
        let abf: Vec<Bf8> = a.iter().map(|&x| Bf8::from_f32(x)).collect();
        let ahf: Vec<Hf8> = a.iter().map(|&x| Hf8::from_f32(x)).collect();
        let bbf: Vec<Bf8> = b.iter().map(|&x| Bf8::from_f32(x)).collect();
        let bhf: Vec<Hf8> = b.iter().map(|&x| Hf8::from_f32(x)).collect();
        tiles.load(NextGen::ab, &abf, 12).unwrap();
        tiles.load(NextGen::ah, &ahf, 12).unwrap();
        tiles.load(NextGen::bb, &bbf, 32).unwrap();
        tiles.load(NextGen::bh, &bhf, 32).unwrap();
        let products: [(&str, Product); 4] = [
            ("tdpbf8ps", |t| {
                t.tdpbf8ps(NextGen::c, NextGen::ab, NextGen::bb).unwrap()
            }),
            ("tdpbhf8ps", |t| {
                t.tdpbhf8ps(NextGen::c, NextGen::ab, NextGen::bh).unwrap()
            }),
            ("tdphbf8ps", |t| {
                t.tdphbf8ps(NextGen::c, NextGen::ah, NextGen::bb).unwrap()
            }),
            ("tdphf8ps", |t| {
                t.tdphf8ps(NextGen::c, NextGen::ah, NextGen::bh).unwrap()
            }),
        ];
        for (name, product) in products {
            tiles.zero(NextGen::c);
            product(&mut tiles);
            let mut got = [0f32; 32];
            tiles.store(NextGen::c, &mut got, 8).unwrap();
            assert_eq!(got.to_vec(), want, "{name}");
        }
    })
    .join()
    .unwrap();
}

/// The typed complex products and row conversions on the emulator, and their refusal where the
/// silicon lacks the feature.
#[test]
fn typed_complex_products_and_row_conversions() {
    use amx_runtime::{configure_typed_on, set_thread_emulator, Backend};
    std::thread::spawn(|| {
        set_thread_emulator(Emulator::new()).unwrap();
        let mut tiles = configure_typed_on::<NextGen>(Backend::Emulated).unwrap();
        // One complex number per row of A (4 rows x 1 dword) and 8 in B's one row:
        // (m + i) * (1 + n i) = (m - n) + (1 + m n) i.
        let h = amx_runtime::half::f16::from_f32;
        let za: Vec<amx_runtime::half::f16> = (0..4).flat_map(|m| [h(m as f32), h(1.0)]).collect();
        let zb: Vec<amx_runtime::half::f16> = (0..8).flat_map(|n| [h(1.0), h(n as f32)]).collect();
        tiles.load(NextGen::za, &za, 2).unwrap();
        tiles.load(NextGen::zb, &zb, 16).unwrap();
        // The shapes: C 4x8 needs A 4 x K and B K x 8 with K = 1; za is 4x2 f16 (one dword)
        // and zb 1x16 f16 (8 dwords).
        let mut re = [0f32; 32];
        let mut im = [0f32; 32];
        tiles.zero(NextGen::c);
        tiles
            .tcmmrlfp16ps(NextGen::c, NextGen::za, NextGen::zb)
            .unwrap();
        tiles.store(NextGen::c, &mut re, 8).unwrap();
        tiles.zero(NextGen::c);
        tiles
            .tcmmimfp16ps(NextGen::c, NextGen::za, NextGen::zb)
            .unwrap();
        tiles.store(NextGen::c, &mut im, 8).unwrap();
        for m in 0..4 {
            for n in 0..8 {
                assert_eq!(re[m * 8 + n], (m as f32) - (n as f32), "re {m},{n}");
                assert_eq!(im[m * 8 + n], 1.0 + (m * n) as f32, "im {m},{n}");
            }
        }
        // Row conversions: row 2 of the i32 tile, and of C.
        let ints: Vec<i32> = (0..32).map(|i| i * 1000 - 7).collect();
        tiles.load(NextGen::ints, &ints, 8).unwrap();
        let row = tiles.tcvtrowd2ps(NextGen::ints, 2).unwrap();
        for (i, x) in row.iter().enumerate() {
            let want = if i < 8 { ints[16 + i] as f32 } else { 0.0 };
            assert_eq!(*x, want, "{i}");
        }
        assert_eq!(tiles.tcvtrowd2ps(NextGen::ints, 4).unwrap(), [0.0; 16]);
        let bf = tiles.tcvtrowps2bf16(NextGen::c, 1, true).unwrap();
        let ph = tiles.tcvtrowps2ph(NextGen::c, 1, false).unwrap();
        for n in 0..8 {
            assert_eq!(bf[2 * n], amx_runtime::half::bf16::ZERO);
            assert_eq!(bf[2 * n + 1].to_f32(), im[8 + n]);
            assert_eq!(ph[2 * n].to_f32(), im[8 + n]);
            assert_eq!(ph[2 * n + 1], amx_runtime::half::f16::ZERO);
        }
        let raw = tiles.tilemovrow(NextGen::ints, 3).unwrap();
        assert_eq!(raw[..4], ints[24].to_le_bytes());
        assert_eq!(raw[32..], [0; 32]);
    })
    .join()
    .unwrap();
    // On the process's backend: the result where the feature is reported, else #UD naming it.
    let caps = amx_runtime::detect();
    let Ok(mut tiles) = NextGen::configure() else {
        return;
    };
    match tiles.tcmmimfp16ps(NextGen::c, NextGen::za, NextGen::zb) {
        Ok(()) => {}
        Err(amx_runtime::Fault::InvalidOpcode(ud)) => {
            assert!(!caps.amx_complex, "{ud}");
            assert_eq!(
                ud.reason(),
                amx_runtime::UdReason::MissingFeature(amx_runtime::Feature::AmxComplex)
            );
        }
        Err(other) => panic!("{other}"),
    }
}
