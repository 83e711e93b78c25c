#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! The emulator's throughput on full 16x16x16 tile products, then against this core's own SIMD
//! peak for the instructions its kernels issue, measured in the same process by
//! `amx_runtime::peak` (VPDPBUSD zmm or VPMADDWD + VPADDD ymm for int8, VFMADD231PS zmm or ymm
//! for bf16, by the kernel path the CPU gets). Ends with the ratios.
//!
//! One 16x16x16 int8 tile product is 16 * 16 * 64 = 16384 multiply-adds; one bf16 product is
//! 16 * 16 * 32 = 8192. The block benches time `amx_runtime::block::dot_2x2`, the GEMM's
//! micro-kernel on the emulator: divide by 128 for the time per tile product.

use std::hint::black_box;

use amx_runtime::block::{dot_2x2, Block};
use amx_runtime::rules::DotKind;
use amx_runtime::{configure_typed_on, tilecfg, Backend, Emulator, TileConfig, TileUnit};
use criterion::{criterion_group, Criterion};

static FULL: TileConfig = tilecfg! { palette 1; t0: 16x64; t1: 16x64; t2: 16x64 };

tilecfg! {
    struct Int8Tiles;
    palette 1;
    t0 as c: 16x16 i32;
    t1 as a: 16x64 i8;
    t2 as b: 16x64 i8;
}

fn loaded() -> Emulator {
    let mut emu = Emulator::new();
    emu.ldtilecfg(FULL.as_bytes()).unwrap();
    // Bytes 0x3C..0x3F in every odd position: bf16 and fp16 values of moderate size, and small
    // int8 values, so no path sees denormals, infinities or NaNs.
    let data: Vec<u8> = (0..1024u32)
        .map(|i| {
            if i % 2 == 1 {
                0x3C + (i % 4) as u8
            } else {
                (i * 37 % 251) as u8
            }
        })
        .collect();
    emu.tileloadd(1, &data, 64).unwrap();
    emu.tileloadd(2, &data, 64).unwrap();
    emu
}

fn bench(c: &mut Criterion) {
    // Each instruction gets its own emulator: an int8 C tile read as f32 would be full of NaNs,
    // which the bit-exact float path recomputes lane by lane.
    let mut group = c.benchmark_group("emulator 16x16x16 tile product");
    let mut emu = loaded();
    group.bench_function("TDPBSSD", |b| b.iter(|| emu.tdpbssd(0, 1, 2).unwrap()));
    // The same through typed tiles configured once, as a kernel runs them (this thread's
    // emulator, not the values above).
    group.bench_function("TDPBSSD, typed tiles", |bench| {
        let data: [i8; 1024] = core::array::from_fn(|i| (i * 37 % 251) as u8 as i8);
        let mut t = configure_typed_on::<Int8Tiles>(Backend::Emulated).unwrap();
        t.zero(Int8Tiles::c);
        t.load(Int8Tiles::a, &data, 64).unwrap();
        t.load(Int8Tiles::b, &data, 64).unwrap();
        bench.iter(|| t.tdpbssd(Int8Tiles::c, Int8Tiles::a, Int8Tiles::b))
    });
    let mut emu = loaded();
    group.bench_function("TDPBUSD", |b| b.iter(|| emu.tdpbusd(0, 1, 2).unwrap()));
    let mut emu = loaded();
    group.bench_function("TDPBF16PS", |b| b.iter(|| emu.tdpbf16ps(0, 1, 2).unwrap()));
    let mut emu = loaded();
    group.bench_function("TDPFP16PS", |b| b.iter(|| emu.tdpfp16ps(0, 1, 2).unwrap()));
    group.bench_function("TILELOADD 1 KiB", |b| {
        // On the heap: a stack array's distance from the emulator's tiles (both locals) decided
        // whether source and destination alias in the low 12 address bits, which moved this
        // row between 19 and 22 ns from one build to the next.
        let data = vec![7u8; 1024];
        b.iter(|| emu.tileloadd(1, black_box(&data), 64).unwrap())
    });
    // A just loaded: what the emulator keeps per tile (A's row corrections for TDPBSSD, the
    // widened A for TDPBF16PS) is computed again for every product. Against the rows above,
    // TILELOADD plus the product on unchanged operands.
    let mut emu = loaded();
    group.bench_function("TILELOADD A + TDPBSSD", |b| {
        let data = [7u8; 1024];
        b.iter(|| {
            emu.tileloadd(1, black_box(&data), 64).unwrap();
            emu.tdpbssd(0, 1, 2).unwrap()
        })
    });
    let mut emu = loaded();
    group.bench_function("TILELOADD A + TDPBF16PS", |b| {
        let data = [0x3Cu8; 1024];
        b.iter(|| {
            emu.tileloadd(1, black_box(&data), 64).unwrap();
            emu.tdpbf16ps(0, 1, 2).unwrap()
        })
    });
    group.finish();

    // A GEMM micro-kernel's k-loop: 2x2 blocks of 32 k-steps (128 instructions per call) over
    // 16 distinct micro-panels of A and B, 64 KiB each, as the GEMM streams them from L2.
    let mut group = c.benchmark_group("emulator 2x2 block of 32 k-steps (128 tile products)");
    let panel = 32 * 2048;
    let a: Vec<u8> = (0..16 * panel as u32)
        .map(|i| (i * 37 % 251) as u8 & 0x3F)
        .collect();
    let b: Vec<u8> = (0..16 * panel as u32)
        .map(|i| (i * 29 % 241) as u8 & 0x3F)
        .collect();
    for kind in [DotKind::Tdpbssd, DotKind::Tdpbusd, DotKind::Tdpbf16ps] {
        let mut block = Block::zeroed();
        let mut p = 0;
        group.bench_function(kind.mnemonic(), |bench| {
            bench.iter(|| {
                p = (p + 1) % 16;
                let (a, b) = (&a[p * panel..], &b[p * panel..]);
                dot_2x2(kind, &mut block, (a, 2048), (b, 2048), 32).unwrap()
            })
        });
    }
    group.finish();
}

/// The emulated TDPBSSD and TDPBF16PS against this core's peak for the instructions their
/// kernels issue, measured in this process by `amx_runtime::peak`, a few times over (the best
/// of each is kept by the measurement itself; the spread between runs shows the noise).
fn ratios() {
    for _ in 0..3 {
        let report = amx_runtime::peak::measure();
        println!("{report}");
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratios();
}
