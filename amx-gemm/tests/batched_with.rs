//! Batched calls with a fused epilogue (`Gemm::run_batched_with`): every batch equals
//! `Gemm::run_with` on the same operands with B packed beforehand, bit for bit, with the
//! residual following the output's batch layout; bad inputs are typed errors before any output
//! is written.

use amx_gemm::{
    bf16, Activation, BLayout, Backend, Epilogue, EpilogueError, Gemm, GemmError, Operand, PackedB,
    Residual, WeightScale, U8S8,
};
use amx_gemm::{BRef, Batch, MatMut, MatRef};
use amx_test_support::random;
use proptest::prelude::*;

proptest! {
    #![proptest_config(amx_test_support::proptest_config(12))]

    #[test]
    fn each_batch_is_the_single_fused_call(
        batch in 0usize..4,
        (m, n, k) in (1usize..40, 1usize..40, 0usize..150),
        (pad, nxk, zp, seed) in (0usize..3, any::<bool>(), 0i32..256, any::<u64>()),
    ) {
        let (lda, ldo) = (k + pad, n + pad);
        let ldb = if nxk { k + pad } else { n + pad };
        let b_extent = if nxk { n * ldb } else { k * ldb };
        let (stride_a, stride_b, stride_o) = (m * lda + 1, b_extent + 3, m * ldo + 2);
        let a: Vec<u8> = random(batch * stride_a, seed);
        let b: Vec<i8> = random(batch * stride_b, seed ^ 1);
        let residual: Vec<f32> = random(batch * stride_o, seed ^ 2);
        let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.1).collect();
        let scales: Vec<f32> = (0..n).map(|j| 0.001 * (j + 1) as f32).collect();
        let e = Epilogue::new()
            .quantized(0.05, zp, WeightScale::Channel(&scales))
            .bias(&bias)
            .activation(Activation::Silu)
            .residual(Residual::F32 { data: &residual, ld: ldo }, 0.5);
        let gemm = Gemm::new().backend(Backend::Emulated).threads(2);
        let layout = if nxk { BLayout::NxK } else { BLayout::KxN };
        let sentinel = bf16::from_f32(7.0);
        let mut out = vec![sentinel; batch * stride_o];
        let stats = gemm
            .run_batched_with::<U8S8, bf16>(
                Batch { count: batch, stride_a, stride_b, stride_c: stride_o },
                MatRef::new(&a, m, k).with_ld(lda),
                BRef { data: &b, k, n, ld: ldb, layout },
                MatMut::new(&mut out, m, n).with_ld(ldo),
                &e,
            )
            .map_err(|err| TestCaseError::fail(format!("{err}")))?;
        prop_assert_eq!(stats.runs.len(), batch);
        let mut want = vec![sentinel; batch * stride_o];
        for i in 0..batch {
            let b_i = &b[i * stride_b..];
            let packed = if nxk {
                PackedB::<U8S8>::pack_transposed(b_i, k, n, ldb).unwrap()
            } else {
                PackedB::<U8S8>::pack(b_i, k, n, ldb).unwrap()
            };
            let e_i = e.residual(Residual::F32 { data: &residual[i * stride_o..], ld: ldo }, 0.5);
            let a_i = MatRef::new(&a[i * stride_a..], m, k).with_ld(lda);
            let out_i = MatMut::new(&mut want[i * stride_o..], m, n).with_ld(ldo);
            gemm.run_with(a_i, &packed, out_i, &e_i).unwrap();
        }
        let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        prop_assert_eq!(bits(&out), bits(&want));
    }
}

#[test]
fn bad_batched_epilogues_are_typed_errors_before_any_output() {
    let (batch, m, n, k) = (3, 2, 4, 64);
    let a = vec![1u8; batch * m * k];
    let b = vec![1i8; batch * k * n];
    let residual = vec![0f32; 2 * m * n + m * n - 1]; // one element short for the last batch
    let gemm = Gemm::new().backend(Backend::Emulated);
    let run = |e: &Epilogue<'_>| {
        let mut out = vec![9f32; batch * m * n];
        let r = gemm.run_batched_with::<U8S8, f32>(
            Batch {
                count: batch,
                stride_a: m * k,
                stride_b: k * n,
                stride_c: m * n,
            },
            MatRef::new(&a, m, k),
            BRef::k_by_n(&b, k, n),
            MatMut::new(&mut out, m, n),
            e,
        );
        assert!(out.iter().all(|&x| x == 9.0), "{r:?}");
        r.unwrap_err()
    };
    let e = Epilogue::new().residual(
        Residual::F32 {
            data: &residual,
            ld: n,
        },
        1.0,
    );
    assert!(matches!(
        run(&e),
        GemmError::SliceTooShort {
            operand: Operand::Residual,
            ..
        }
    ));
    let short = [1.0f32; 3];
    assert!(matches!(
        run(&Epilogue::new().bias(&short)),
        GemmError::DimensionMismatch { .. }
    ));
    let scales = [1.0f32; 8];
    let grouped = WeightScale::Group {
        scales: &scales,
        group: 32,
    };
    assert!(matches!(
        run(&Epilogue::new().quantized(1.0, 0, grouped)),
        GemmError::InvalidEpilogue(EpilogueError::GroupSize(32))
    ));
}
