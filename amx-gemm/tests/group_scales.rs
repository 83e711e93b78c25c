//! Per-K-group weight scales (`WeightScale::Group`): the fused path equals the step-by-step
//! model (`reference::linear_model_grouped`) bit for bit and the `f64` reference within its
//! bound, over shapes, groups, zero points, thread counts, A layouts and packed or borrowed
//! weights; one group equals per-channel scales; bad groups are typed errors.

use amx_gemm::reference::{linear_model_grouped, verify_linear};
use amx_gemm::{
    bf16, Activation, Backend, Bf16, Epilogue, EpilogueError, Gemm, GemmError, Int8, PackedB,
    PackedBView, Precision, WeightScale, U8S8,
};
use amx_gemm::{BRef, MatMut, MatRef};
use amx_test_support::random;
use proptest::prelude::*;

/// A copy of `blob` at a 64-byte-aligned address, as a memory-mapped file would give it.
fn aligned(blob: &[u8]) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; blob.len() + 64];
    let at = buf.as_ptr().align_offset(64);
    buf[at..at + blob.len()].copy_from_slice(blob);
    (buf, at)
}

#[derive(Clone, Debug)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    group: usize,
    zero_point: i32,
    threads: usize,
    transposed: bool,
    from_blob: bool,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..70, 1usize..70, 0usize..450, 1usize..5),
        (
            0i32..256,
            1usize..3,
            any::<bool>(),
            any::<bool>(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |((m, n, k, g), (zero_point, threads, transposed, from_blob, seed))| Case {
                m,
                n,
                k,
                group: 64 * g,
                zero_point,
                threads,
                transposed,
                from_blob,
                seed,
            },
        )
}

/// Runs `c` with per-group scales for `P` (int8 precisions) and checks it.
fn check<P: Precision>(c: &Case, zero_point: i32) -> Result<(), TestCaseError>
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
{
    let (m, n, k) = (c.m, c.n, c.k);
    let a: Vec<P::A> = random(m * k, c.seed);
    let b: Vec<P::B> = random(k * n, c.seed ^ 1);
    let groups = k.div_ceil(c.group);
    let scales: Vec<f32> = (0..groups * n)
        .map(|i| 0.0005 + 0.0002 * (i % 23) as f32)
        .collect();
    let bias: Vec<f32> = (0..n).map(|j| (j % 7) as f32 * 0.5 - 1.5).collect();
    let w_scale = WeightScale::Group {
        scales: &scales,
        group: c.group,
    };
    // A third of the cases give each row of A its own scale and zero point.
    let row_scales: Vec<f32> = (0..m).map(|i| 0.02 + 0.002 * (i % 9) as f32).collect();
    let row_zps: Vec<i32> = (0..m)
        .map(|i| (zero_point + 29 * i as i32) % 256 * i32::from(zero_point != 0))
        .collect();
    let e = if c.seed.is_multiple_of(3) {
        Epilogue::new().quantized_rows(&row_scales, Some(&row_zps), w_scale)
    } else {
        Epilogue::new().quantized(0.03, zero_point, w_scale)
    };
    let e = e.bias(&bias).activation(Activation::GeluTanh);
    let packed = PackedB::<P>::pack(&b, k, n, n).unwrap();
    let blob = packed.to_bytes();
    let (buf, at) = aligned(&blob);
    let view = if c.from_blob {
        PackedBView::<P>::from_blob(&buf[at..at + blob.len()]).unwrap()
    } else {
        packed.view()
    };
    let mut at_t = vec![P::A::default(); k * m];
    for i in 0..m {
        for kk in 0..k {
            at_t[kk * m + i] = a[i * k + kk];
        }
    }
    let (a_in, lda) = if c.transposed { (&at_t, m) } else { (&a, k) };
    let gemm = Gemm::new()
        .backend(Backend::Emulated)
        .threads(c.threads)
        .a_transposed(c.transposed);
    let mut out = vec![f32::NAN; m * n];
    gemm.run_view_with(
        MatRef::new(a_in, m, k).with_ld(lda),
        view,
        MatMut::new(&mut out, m, n),
        &e,
    )
    .map_err(|err| TestCaseError::fail(format!("{err}")))?;
    let mut model = vec![f32::NAN; m * n];
    linear_model_grouped::<P, f32>(
        MatRef::new(&a, m, k),
        BRef::k_by_n(&b, k, n),
        &e,
        MatMut::new(&mut model, m, n),
    )
    .unwrap();
    for (idx, (got, want)) in out.iter().zip(&model).enumerate() {
        prop_assert!(
            got.to_bits() == want.to_bits(),
            "({}, {}) of {m}x{n}x{k}, group {}: fused {got}, model {want}",
            idx / n,
            idx % n,
            c.group
        );
    }
    let check = verify_linear::<P, f32>(
        MatRef::new(&a, m, k),
        BRef::k_by_n(&b, k, n),
        &e,
        MatRef::new(&out, m, n),
    );
    prop_assert!(check.is_ok(), "{}", check.unwrap_err());
    // The bf16 output is the f32 one rounded (the same steps, one more conversion).
    let mut out16 = vec![bf16::ZERO; m * n];
    gemm.run_view_with(
        MatRef::new(a_in, m, k).with_ld(lda),
        view,
        MatMut::new(&mut out16, m, n),
        &e,
    )
    .map_err(|err| TestCaseError::fail(format!("{err}")))?;
    for (h, f) in out16.iter().zip(&out) {
        prop_assert_eq!(h.to_bits(), bf16::from_f32(*f).to_bits());
    }
    Ok(())
}

proptest! {
    #![proptest_config(amx_test_support::proptest_config(16))]

    #[test]
    fn grouped_layers_match_the_model_and_the_f64_reference(c in case()) {
        check::<U8S8>(&c, c.zero_point)?;
        check::<Int8>(&c, 0)?;
    }
}

/// With one group covering all of K, group scales are per-channel scales: the same operations
/// (`f32(q) * s`, then `+ bias`), so the same bits.
#[test]
fn one_group_is_per_channel_scaling() {
    let (m, n, k) = (33, 47, 192);
    let a: Vec<u8> = random(m * k, 1);
    let b: Vec<i8> = random(k * n, 2);
    let packed = PackedB::<U8S8>::pack(&b, k, n, n).unwrap();
    let scales: Vec<f32> = (0..n).map(|j| 0.001 * (j + 1) as f32).collect();
    let bias = vec![0.25f32; n];
    let gemm = Gemm::new().backend(Backend::Emulated).threads(2);
    let run = |w: WeightScale<'_>| {
        let e = Epilogue::new().quantized(0.02, 128, w).bias(&bias);
        let mut out = vec![0f32; m * n];
        gemm.run_with(
            MatRef::new(&a, m, k),
            &packed,
            MatMut::new(&mut out, m, n),
            &e,
        )
        .unwrap();
        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    };
    let channel = run(WeightScale::Channel(&scales));
    for group in [192, 256, 1024] {
        let grouped = run(WeightScale::Group {
            scales: &scales,
            group,
        });
        assert_eq!(grouped, channel, "group {group}");
    }
    // Two groups with the same scales are not the same bits in general (two roundings), but
    // they are the same value within the bound: the f64 reference checks that.
    let twice: Vec<f32> = scales.iter().chain(&scales).copied().collect();
    let e = Epilogue::new()
        .quantized(
            0.02,
            128,
            WeightScale::Group {
                scales: &twice,
                group: 128,
            },
        )
        .bias(&bias);
    let mut out = vec![0f32; m * n];
    gemm.run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut out, m, n),
        &e,
    )
    .unwrap();
    let check = verify_linear::<U8S8, f32>(
        MatRef::new(&a, m, k),
        BRef::k_by_n(&b, k, n),
        &e,
        MatRef::new(&out, m, n),
    );
    assert!(check.is_ok(), "{}", check.unwrap_err());
}

/// The scale of group g really applies to rows g * group.. of K only: a B that is zero outside
/// one group gives outputs scaled by that group's scale alone.
#[test]
fn each_group_has_its_own_scale() {
    let (m, n, k, group) = (2, 3, 256, 64);
    let a = vec![1i8; m * k];
    for g in 0..4 {
        let mut b = vec![0i8; k * n];
        for kk in g * group..(g + 1) * group {
            for j in 0..n {
                b[kk * n + j] = 1;
            }
        }
        let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
        // Scale of group h, column j: 2^h * (j + 1).
        let scales: Vec<f32> = (0..4 * n)
            .map(|i| (1 << (i / n)) as f32 * ((i % n) + 1) as f32)
            .collect();
        let e = Epilogue::new().quantized(
            1.0,
            0,
            WeightScale::Group {
                scales: &scales,
                group,
            },
        );
        let mut out = vec![0f32; m * n];
        Gemm::new()
            .backend(Backend::Emulated)
            .run_with(
                MatRef::new(&a, m, k),
                &packed,
                MatMut::new(&mut out, m, n),
                &e,
            )
            .unwrap();
        for i in 0..m {
            for j in 0..n {
                let want = 64.0 * (1 << g) as f32 * (j + 1) as f32;
                assert_eq!(out[i * n + j], want, "group {g}, ({i}, {j})");
            }
        }
    }
}

#[test]
fn bad_groups_are_typed_errors_and_leave_the_output_alone() {
    let (m, n, k) = (2, 5, 200);
    let a = vec![1u8; m * k];
    let packed = PackedB::<U8S8>::pack(&vec![1i8; k * n], k, n, n).unwrap();
    let scales = vec![1.0f32; 4 * n];
    let gemm = Gemm::new().backend(Backend::Emulated);
    let run = |group: usize, scales: &[f32]| {
        let e = Epilogue::new().quantized(1.0, 3, WeightScale::Group { scales, group });
        let mut out = vec![9u8; m * n];
        let r = gemm.run_with(
            MatRef::new(&a, m, k),
            &packed,
            MatMut::new(&mut out, m, n),
            &e,
        );
        assert!(out.iter().all(|&x| x == 9), "{r:?}");
        r.unwrap_err()
    };
    for group in [0, 32, 96, 100] {
        assert!(
            run(group, &scales) == GemmError::InvalidEpilogue(EpilogueError::GroupSize(group)),
            "{group}"
        );
    }
    // ceil(200 / 64) = 4 groups of 5 channels: 19 scales are too few, for the model too.
    assert!(matches!(
        run(64, &scales[..19]),
        GemmError::DimensionMismatch {
            expected: 20,
            found: 19,
            ..
        }
    ));
    let b = vec![1i8; k * n];
    let e = Epilogue::new().quantized(
        1.0,
        3,
        WeightScale::Group {
            scales: &scales[..19],
            group: 64,
        },
    );
    let mut model = vec![9u8; m * n];
    let err = linear_model_grouped::<U8S8, u8>(
        MatRef::new(&a, m, k),
        BRef::k_by_n(&b, k, n),
        &e,
        MatMut::new(&mut model, m, n),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            GemmError::DimensionMismatch {
                expected: 20,
                found: 19,
                ..
            }
        ),
        "{err:?}"
    );
    // bf16 weights are not group-quantized.
    let pb = PackedB::<Bf16>::pack(&vec![bf16::ONE; k * n], k, n, n).unwrap();
    let e = Epilogue::new().quantized(
        1.0,
        0,
        WeightScale::Group {
            scales: &scales,
            group: 64,
        },
    );
    let mut out = vec![0f32; m * n];
    let err = gemm
        .run_with(
            MatRef::new(&vec![bf16::ONE; m * k], m, k),
            &pb,
            MatMut::new(&mut out, m, n),
            &e,
        )
        .unwrap_err();
    assert_eq!(
        err,
        GemmError::InvalidEpilogue(EpilogueError::GroupScalesForFloats)
    );
}
