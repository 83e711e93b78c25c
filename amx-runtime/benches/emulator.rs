#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! The emulator's throughput on full 16x16x16 tile products, against this CPU's own SIMD peak
//! measured in the same run: VPDPBUSD (AVX-512 VNNI) for int8, VFMADD231PS (AVX-512F) for bf16
//! and fp16. Ends with the ratios.
//!
//! One 16x16x16 int8 tile product is 16 * 16 * 64 = 16384 multiply-adds (1024 VPDPBUSD of 16
//! lanes x 4 bytes at peak would be 256 instructions); one bf16 product is 16 * 16 * 32 = 8192
//! multiply-adds (512 FMAs of 16 lanes).

use std::hint::black_box;
#[cfg(target_arch = "x86_64")]
use std::time::Instant;

use amx_runtime::{tilecfg, Emulator, TileConfig, TileUnit};
use criterion::{criterion_group, Criterion};

static FULL: TileConfig = tilecfg! { palette 1; t0: 16x64; t1: 16x64; t2: 16x64 };

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
    let mut emu = loaded();
    group.bench_function("TDPBUSD", |b| b.iter(|| emu.tdpbusd(0, 1, 2).unwrap()));
    let mut emu = loaded();
    group.bench_function("TDPBF16PS", |b| b.iter(|| emu.tdpbf16ps(0, 1, 2).unwrap()));
    let mut emu = loaded();
    group.bench_function("TDPFP16PS", |b| b.iter(|| emu.tdpfp16ps(0, 1, 2).unwrap()));
    group.bench_function("TILELOADD 1 KiB", |b| {
        let data = [7u8; 1024];
        b.iter(|| emu.tileloadd(1, black_box(&data), 64).unwrap())
    });
    group.finish();
}

/// Nanoseconds per call of `f`, best of several timed batches.
#[cfg(target_arch = "x86_64")]
fn ns_per(mut f: impl FnMut(), calls: u32) -> f64 {
    (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            t.elapsed().as_nanos() as f64 / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;

    /// 24 independent VPDPBUSD chains, 1000 rounds: 24000 instructions.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub fn vnni_24000() -> __m512i {
        let mut acc = [_mm512_setzero_si512(); 24];
        let a = _mm512_set1_epi32(0x0102_0304);
        let b = _mm512_set1_epi32(0x0101_0101);
        for _ in 0..1000 {
            for x in acc.iter_mut() {
                *x = _mm512_dpbusd_epi32(*x, a, b);
            }
        }
        acc.iter()
            .fold(_mm512_setzero_si512(), |s, &x| _mm512_add_epi32(s, x))
    }

    /// 24 independent FMA chains, 1000 rounds: 24000 instructions.
    #[target_feature(enable = "avx512f")]
    pub fn fma_24000() -> __m512 {
        let mut acc = [_mm512_setzero_ps(); 24];
        let a = _mm512_set1_ps(1.000_001);
        let b = _mm512_set1_ps(0.999_999);
        for _ in 0..1000 {
            for x in acc.iter_mut() {
                *x = _mm512_fmadd_ps(*x, a, b);
            }
        }
        acc.iter()
            .fold(_mm512_setzero_ps(), |s, &x| _mm512_add_ps(s, x))
    }
}

fn ratios() {
    #[cfg(target_arch = "x86_64")]
    {
        let (mut e1, mut e2, mut e3) = (loaded(), loaded(), loaded());
        let int8 = ns_per(|| e1.tdpbssd(0, 1, 2).unwrap(), 20_000);
        let bf16 = ns_per(|| e2.tdpbf16ps(0, 1, 2).unwrap(), 20_000);
        let fp16 = ns_per(|| e3.tdpfp16ps(0, 1, 2).unwrap(), 20_000);
        if std::arch::is_x86_feature_detected!("avx512vnni") {
            // SAFETY: the features the function is compiled for were detected just above.
            let vnni = ns_per(|| _ = black_box(unsafe { peak::vnni_24000() }), 200) / 24000.0;
            // A tile product is 256 VPDPBUSD at peak.
            let at_peak = 256.0 * vnni;
            println!(
                "int8: TDPBSSD emulated in {int8:.0} ns; 256 VPDPBUSD at this CPU's peak take {at_peak:.0} ns: {:.0}% of the AVX-512-VNNI peak",
                100.0 * at_peak / int8
            );
        } else {
            println!("int8: {int8:.0} ns per TDPBSSD (no AVX-512 VNNI here to compare against)");
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F was detected just above.
            let fma = ns_per(|| _ = black_box(unsafe { peak::fma_24000() }), 200) / 24000.0;
            // A bf16 tile product is 8192 multiply-adds: 512 FMAs of 16 lanes at peak.
            let at_peak = 512.0 * fma;
            println!(
                "bf16: TDPBF16PS emulated in {bf16:.0} ns; 512 FMAs at peak take {at_peak:.0} ns: {:.0}% of the fp32 FMA peak",
                100.0 * at_peak / bf16
            );
            println!(
                "fp16: TDPFP16PS emulated in {fp16:.0} ns: {:.0}% of the fp32 FMA peak",
                100.0 * at_peak / fp16
            );
        }
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratios();
}
