//! On the emulator's AVX2 floating-point kernels a block of three or more micro-panels of A
//! runs each panel of B against every micro-panel in turn, with the panel widened once
//! (`amx_runtime::block::PreparedB`); fewer micro-panels keep the kernel's own widening. Each
//! output's arithmetic is the same either way, so a product of many rows equals, bit for bit,
//! the same rows computed 32 at a time, for bf16 and fp16, plain and accumulating, NaNs
//! included (a block with a NaN lane is redone instruction by instruction). Where the float
//! path is not AVX2 (`AMX_EMULATOR_KERNELS=avx2` forces it on a CPU with AVX-512) the same
//! equality holds and checks the other kernels.

use amx_gemm::{bf16, f16, Backend, Bf16, Fp16, Gemm, Mode, PackedB, Precision};
use amx_test_support::random;

/// `m x n` by `k`, all rows in one call and again 32 rows per call: equal bit for bit.
fn rows_at_once_equal_rows_in_slices<P>(a: &[P::A], b: &[P::B], (m, n, k): (usize, usize, usize))
where
    P: Precision<C = f32>,
{
    let packed = PackedB::<P>::pack(b, k, n, n).unwrap();
    for mode in [Mode::Overwrite, Mode::Accumulate] {
        let gemm = Gemm::new().threads(1).backend(Backend::Emulated).mode(mode);
        let start: Vec<f32> = random(m * n, 7);
        let mut whole = start.clone();
        gemm.run(m, a, k, &packed, &mut whole, n).unwrap();
        let mut sliced = start.clone();
        for r0 in (0..m).step_by(32) {
            let rows = 32.min(m - r0);
            gemm.run(
                rows,
                &a[r0 * k..(r0 + rows) * k],
                k,
                &packed,
                &mut sliced[r0 * n..(r0 + rows) * n],
                n,
            )
            .unwrap();
        }
        let differ = whole
            .iter()
            .zip(&sliced)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count();
        assert_eq!(differ, 0, "{mode:?} {m}x{n}x{k}: {differ} outputs differ");
    }
}

#[test]
fn bf16_rows_at_once_equal_rows_in_slices() {
    for (m, n, k, seed) in [(96, 64, 512, 1), (160, 96, 1056, 2), (128, 32, 96, 3)] {
        let mut a: Vec<bf16> = random(m * k, seed);
        let b: Vec<bf16> = random(k * n, seed ^ 9);
        // A NaN in one row: its block is redone instruction by instruction.
        a[k + 5] = bf16::NAN;
        rows_at_once_equal_rows_in_slices::<Bf16>(&a, &b, (m, n, k));
    }
}

#[test]
fn fp16_rows_at_once_equal_rows_in_slices() {
    for (m, n, k, seed) in [(96, 64, 512, 4), (160, 96, 1056, 5), (128, 32, 96, 6)] {
        let mut a: Vec<f16> = random(m * k, seed);
        let b: Vec<f16> = random(k * n, seed ^ 9);
        a[2 * k + 7] = f16::NAN;
        rows_at_once_equal_rows_in_slices::<Fp16>(&a, &b, (m, n, k));
    }
}
