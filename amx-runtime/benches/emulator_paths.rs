#![allow(missing_docs)] // a bench binary
//! The emulator's integer kernels side by side on this CPU: an emulated TDPBSSD on full tiles
//! (the arithmetic alone, as `emulator_layers`' "kernel" row) with each kernel the CPU can
//! run, against the peak of that kernel's own instruction sequence, all measured in this
//! process. On a CPU with AVX-512 this shows what the AVX-VNNI, AVX2 and portable kernels
//! give the CPUs that have nothing better.
//!
//! Then the same in 2x2 blocks of 32 k-steps (`amx_runtime::block::dot_2x2`'s work): the fused
//! block kernels of AVX-512 and AVX-VNNI, the per-instruction kernels step by step elsewhere.
//!
//! Then TDPBF16PS in 2x2 blocks on every floating-point kernel, the block kernel against the
//! same kernel instruction by instruction.
//!
//! Timing: batches, each kernel's batches taking turns, the best batch kept (so a noisy
//! stretch of a shared machine hits every kernel alike); before each timed block batch its
//! panels are read once, so that no kernel pays for the one before it having used others.

use std::hint::black_box;
use std::time::Instant;

use amx_runtime::peak::{
    __bf16_block_on, __float_paths, __float_peak_on, __int8_block_on, __int8_kernel_on,
    __int8_paths, __int8_peak_on,
};

/// Operations of one 16x16x64 int8 tile product (2 per multiply-add).
const OPS: f64 = 2.0 * 16.0 * 16.0 * 64.0;
/// Operations of one 16x16x32 bf16 tile product.
const FLOAT_OPS: f64 = 2.0 * 16.0 * 16.0 * 32.0;
/// k-steps per block, as the emulated GEMM's default `kc`.
const STEPS: usize = 32;

/// Reads one byte of every cache line of `x`, so that the next kernel finds it in cache.
fn touch(x: &[u8]) {
    let sum: u64 = x.iter().step_by(64).map(|&v| u64::from(v)).sum();
    black_box(sum);
}

/// TDPBF16PS in 2x2 blocks of [`STEPS`] k-steps on every floating-point kernel the CPU has,
/// block kernel and instruction by instruction, over 16 micro-panels of moderate bf16 values
/// (no NaN, infinity or denormal: the fast paths throughout).
fn float_paths() {
    let panel = STEPS * 2048;
    // bf16 elements between 2^-7 and 2^1 of either sign: exponent byte 0x3C..0x3F.
    let make = |seed: usize| -> Vec<u8> {
        (0..16 * panel)
            .map(|i| {
                if i % 2 == 1 {
                    (0x3C + ((i * seed) % 4) as u8) | ((((i / 2 * seed) % 2) as u8) << 7)
                } else {
                    (i * seed % 251) as u8
                }
            })
            .collect()
    };
    let (pa, pb) = (make(37), make(29));
    let runs: Vec<(amx_runtime::peak::KernelPath, bool)> = __float_paths()
        .into_iter()
        .flat_map(|p| [(p, true), (p, false)])
        .collect();
    let mut blocks = vec![[[0u8; 1024]; 4]; runs.len()];
    let mut best = vec![f64::INFINITY; runs.len()];
    for round in 0..20 {
        for ((&(path, fused), c), slot) in runs.iter().zip(blocks.iter_mut()).zip(best.iter_mut()) {
            // Every kernel starts with the batch's panels in cache, whatever ran before it.
            for i in 0..2 {
                let p = (round * 2 + i) % 16;
                touch(&pa[p * panel..][..panel]);
                touch(&pb[p * panel..][..panel]);
            }
            let t = Instant::now();
            for i in 0..2 {
                let p = (round * 2 + i) % 16;
                let (a, b) = (&pa[p * panel..][..panel], &pb[p * panel..][..panel]);
                assert!(__bf16_block_on(path, fused, black_box(c), a, b, STEPS));
            }
            *slot = slot.min(t.elapsed().as_nanos() as f64 / (2.0 * 4.0 * STEPS as f64));
        }
    }
    assert!(
        blocks.windows(2).all(|w| w[0] == w[1]),
        "the float kernels disagree"
    );
    for (&(path, fused), ns) in runs.iter().zip(&best) {
        let share = match __float_peak_on(path) {
            Some(peak) => format!(
                "{:.0}% of its own peak ({:.1} GFLOP/s, {})",
                100.0 * FLOAT_OPS / ns / peak.gops(),
                peak.gops(),
                peak.sequence
            ),
            None => "no peak measured".to_string(),
        };
        let how = if fused {
            "block kernel"
        } else {
            "instruction by instruction"
        };
        println!(
            "TDPBF16PS in 2x2 blocks on the {path} kernel, {how}: {ns:.1} ns per product, {share}"
        );
    }
}

fn main() {
    let a: [u8; 1024] = core::array::from_fn(|i| (i * 37 % 251) as u8);
    let b: [u8; 1024] = core::array::from_fn(|i| (i * 29 % 241) as u8);
    let paths = __int8_paths();
    let mut cs = vec![[0u8; 1024]; paths.len()];
    let mut best = vec![f64::INFINITY; paths.len()];
    for _ in 0..40 {
        for ((path, c), slot) in paths.iter().zip(cs.iter_mut()).zip(best.iter_mut()) {
            let t = Instant::now();
            for _ in 0..200 {
                assert!(__int8_kernel_on(*path, black_box(c), &a, &b));
            }
            *slot = slot.min(t.elapsed().as_nanos() as f64 / 200.0);
        }
    }
    // Every kernel computed the same 8000 products from the same start: the same bits.
    assert!(cs.windows(2).all(|w| w[0] == w[1]), "the kernels disagree");

    // 2x2 blocks of 32 k-steps (128 products) over 16 distinct 64 KiB micro-panels of A and
    // B, as the emulated GEMM streams them: the fused block kernels where the path has one,
    // else its per-instruction kernel step by step. Batches of 4 blocks, best of 40.
    let panel = STEPS * 2048;
    let pa: Vec<u8> = (0..16 * panel).map(|i| (i * 37 % 251) as u8).collect();
    let pb: Vec<u8> = (0..16 * panel).map(|i| (i * 29 % 241) as u8).collect();
    let mut blocks = vec![[[0u8; 1024]; 4]; paths.len()];
    let mut block_best = vec![f64::INFINITY; paths.len()];
    for round in 0..40 {
        for ((path, c), slot) in paths
            .iter()
            .zip(blocks.iter_mut())
            .zip(block_best.iter_mut())
        {
            // Every kernel starts with the batch's panels in cache, whatever ran before it.
            for i in 0..4 {
                let p = (round * 4 + i) % 16;
                touch(&pa[p * panel..][..panel]);
                touch(&pb[p * panel..][..panel]);
            }
            let t = Instant::now();
            for i in 0..4 {
                // The same panels, in the same order, for every kernel.
                let p = (round * 4 + i) % 16;
                let (a, b) = (&pa[p * panel..][..panel], &pb[p * panel..][..panel]);
                assert!(__int8_block_on(*path, black_box(c), a, b, STEPS));
            }
            *slot = slot.min(t.elapsed().as_nanos() as f64 / (4.0 * 4.0 * STEPS as f64));
        }
    }
    assert!(
        blocks.windows(2).all(|w| w[0] == w[1]),
        "the block kernels disagree"
    );
    let slowest = best.iter().copied().fold(0.0, f64::max);
    for ((path, ns), block_ns) in paths.iter().zip(&best).zip(&block_best) {
        let peak = __int8_peak_on(*path);
        let share = |ns: f64| match peak {
            Some(peak) => format!("{:.0}% of its own peak", 100.0 * OPS / ns / peak.gops()),
            None => "no peak measured".to_string(),
        };
        let peak_text = match peak {
            Some(peak) => format!("{:.1} GOP/s, {}", peak.gops(), peak.sequence),
            None => "none".to_string(),
        };
        println!(
            "TDPBSSD on the {path} kernel: {ns:.1} ns ({:.1} GOP/s, {:.2}x the slowest, {}); \
             in 2x2 blocks {block_ns:.1} ns per product ({}); peak {peak_text}",
            OPS / ns,
            slowest / ns,
            share(*ns),
            share(*block_ns),
        );
    }
    float_paths();
}
