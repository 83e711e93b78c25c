//! The precisions beyond int8, u8s8 and bf16: s8u8 (TDPBSUD), u8u8 (TDPBUUD) and fp16
//! (TDPFP16PS), on every backend that has the instruction, against the reference; unsigned
//! weights' column sums; and fp16 refused, as a typed error, by silicon without AMX-FP16.

mod common;

use amx_gemm::reference::linear_model;
use amx_gemm::{
    Backend, Epilogue, Fp16, Gemm, GemmError, MatMut, MatRef, Mode, PackedB, Precision,
    PrecisionKind, Unsupported, WeightScale, S8U8, U8U8,
};
use amx_runtime::Feature;
use amx_test_support::random;
use common::{backends, check};

/// The backends that run `P`: TDPFP16PS needs AMX-FP16 on the silicon code path (the trap
/// engine models it with `AMX_TRAP_CPU=gnr`).
fn runs<P: Precision>(test: &str) -> Vec<Backend> {
    let fp16 = amx_runtime::detect().amx_fp16;
    backends(test)
        .into_iter()
        .filter(|&b| P::KIND != PrecisionKind::Fp16 || b != Backend::Hardware || fp16)
        .collect()
}

/// Edge sizes in M, N and K, both modes, padding, 1 and 3 threads.
fn shapes<P: Precision>(test: &str)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    const EDGES: [usize; 5] = [1, 16, 17, 33, 100];
    for backend in runs::<P>(test) {
        let mut i = 0u64;
        for m in EDGES {
            for n in EDGES {
                for k in [1, 64, 65, 130] {
                    let mode = [Mode::Overwrite, Mode::Accumulate][i as usize % 2];
                    let threads = 1 + 2 * (i as usize % 2);
                    check::<P>(backend, m, n, k, threads, mode, i as usize % 3, i);
                    i += 1;
                }
            }
        }
    }
}

#[test]
fn s8u8_matches_the_reference() {
    shapes::<S8U8>("s8u8_matches_the_reference");
}

#[test]
fn u8u8_matches_the_reference() {
    shapes::<U8U8>("u8u8_matches_the_reference");
}

#[test]
fn fp16_matches_the_reference() {
    shapes::<Fp16>("fp16_matches_the_reference");
}

/// Column sums of unsigned weights add bytes as `u8`, at pack time and when a version-1 blob
/// is read back, and a zero point with them is compensated exactly (the fused path equals the
/// step-by-step model).
#[test]
fn unsigned_weights_compensate_the_zero_point() {
    let (m, n, k) = (7, 40, 200);
    let a: Vec<u8> = random(m * k, 21);
    let w: Vec<u8> = random(k * n, 22);
    let packed = PackedB::<U8U8>::pack(&w, k, n, n).unwrap();
    let want: Vec<i32> = (0..n)
        .map(|j| (0..k).map(|p| i32::from(w[p * n + j])).sum())
        .collect();
    assert_eq!(packed.col_sums(), Some(&want[..]));
    let back = PackedB::<U8U8>::from_bytes(&packed.to_bytes()).unwrap();
    assert_eq!(back.col_sums(), Some(&want[..]));

    let e = Epilogue::new()
        .quantized(0.01, 200, WeightScale::Tensor(0.02))
        .requantize(0.5, 3);
    let gemm = Gemm::new().backend(Backend::Emulated).threads(2);
    let mut out = vec![0i8; m * n];
    gemm.run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut out, m, n),
        &e,
    )
    .unwrap();
    let mut acc = vec![0i32; m * n];
    gemm.run(m, &a, k, &packed, &mut acc, n).unwrap();
    let mut model = vec![0i8; m * n];
    linear_model::<U8U8, i8>(
        MatRef::new(&acc, m, n),
        packed.col_sums(),
        &e,
        MatMut::new(&mut model, m, n),
    )
    .unwrap();
    assert_eq!(out, model);
}

/// fp16 on silicon that does not report AMX-FP16 is refused before C is written.
#[test]
fn fp16_on_silicon_without_amx_fp16_is_refused() {
    if amx_runtime::Hardware::new().is_err() {
        amx_test_support::skip!("no silicon code path here");
    }
    if amx_runtime::detect().amx_fp16 {
        amx_test_support::skip_not_applicable!("this CPU reports AMX-FP16");
    }
    let (m, n, k) = (20, 20, 40);
    let a = vec![amx_gemm::f16::ONE; m * k];
    let packed = PackedB::<Fp16>::pack(&vec![amx_gemm::f16::ONE; k * n], k, n, n).unwrap();
    let mut c = vec![3f32; m * n];
    let err = Gemm::new()
        .backend(Backend::Hardware)
        .run(m, &a, k, &packed, &mut c, n)
        .unwrap_err();
    assert_eq!(
        err,
        GemmError::Unsupported(Unsupported::Feature {
            precision: PrecisionKind::Fp16,
            feature: Feature::AmxFp16
        })
    );
    assert!(c.iter().all(|&x| x == 3.0));
    // The emulator runs it.
    Gemm::new()
        .backend(Backend::Emulated)
        .run(m, &a, k, &packed, &mut c, n)
        .unwrap();
    assert!(c.iter().all(|&x| x == k as f32));
}

#[test]
fn names_round_trip() {
    for kind in PrecisionKind::ALL {
        assert_eq!(kind.name().parse::<PrecisionKind>(), Ok(kind));
        if let Some(dot) = kind.dot_kind() {
            assert_eq!(dot.mnemonic(), kind.instruction());
        } else {
            assert!(kind.is_fp8(), "{kind}");
        }
    }
    assert_eq!("f16".parse::<PrecisionKind>(), Ok(PrecisionKind::Fp16));
}

/// Per-K-group scales with unsigned weights: each group's column sums add the bytes as `u8`
/// (computed from the packed data on first use), so the fused path equals the model.
#[test]
fn unsigned_weights_with_group_scales() {
    let (m, n, k, group) = (5, 36, 256, 128);
    let a: Vec<u8> = random(m * k, 31);
    let w: Vec<u8> = random(k * n, 32);
    let scales: Vec<f32> = (0..2 * n).map(|i| 0.001 * (1 + i % 5) as f32).collect();
    let e = Epilogue::new().quantized(
        0.02,
        77,
        WeightScale::Group {
            scales: &scales,
            group,
        },
    );
    let packed = PackedB::<U8U8>::pack(&w, k, n, n).unwrap();
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
    let mut model = vec![0f32; m * n];
    amx_gemm::reference::linear_model_grouped::<U8U8, f32>(
        MatRef::new(&a, m, k),
        amx_gemm::BRef::k_by_n(&w, k, n),
        &e,
        MatMut::new(&mut model, m, n),
    )
    .unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&out), bits(&model));
}

#[test]
#[ignore = "run by fp16_on_the_silicon_code_path_of_a_granite_rapids in a child process"]
fn child_fp16_silicon_code_path() {
    if !amx_test_support::in_child() {
        return;
    }
    amx_trap::install().expect("the engine runs the Granite Rapids model here");
    amx_runtime::permit::request_permission().unwrap();
    assert!(amx_runtime::detect().amx_fp16);
    for (i, (m, n, k)) in [(1, 17, 31), (17, 40, 65), (40, 32, 32)]
        .into_iter()
        .enumerate()
    {
        let mode = [Mode::Overwrite, Mode::Accumulate][i % 2];
        check::<Fp16>(Backend::Hardware, m, n, k, 1 + i % 2, mode, i % 3, i as u64);
    }
}

/// The silicon code path of TDPFP16PS where the trap engine runs a Granite Rapids: on a CPU
/// without AMX it executes every instruction, on AMX silicon without AMX-FP16 it executes the
/// fp16 products and the silicon the rest.
#[test]
fn fp16_on_the_silicon_code_path_of_a_granite_rapids() {
    if !amx_trap::runs_here(amx_trap::Model::GraniteRapids) {
        amx_test_support::skip(
            amx_test_support::Kind::NotApplicable,
            "the trap engine does not run here, or this silicon has AMX-FP16 itself (the other \
             tests run its hardware backend)",
        );
        return;
    }
    amx_test_support::Child::new("child_fp16_silicon_code_path")
        .env("AMX_TRAP_CPU", "gnr")
        .run()
        .assert_passed();
}
