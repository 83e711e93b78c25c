//! The FP8 precisions (TDPBF8PS, TDPHF8PS, TDPBHF8PS, TDPHBF8PS): edge shapes against the
//! reference on every backend that has AMX-FP8 (the emulator always), bit for bit against a
//! scalar model of the instructions' sums, special values by class, a fused linear layer,
//! packed weights through a blob, and the typed refusal of silicon without AMX-FP8.

mod common;

use amx_gemm::reference::{linear_model, verify, Outputs};
use amx_gemm::{
    bf16, Activation, Backend, Bf8, Bf8Bf8, Bf8Hf8, Epilogue, Gemm, GemmError, Hf8, Hf8Bf8, Hf8Hf8,
    MatMut, MatRef, Mode, PackedB, Precision, PrecisionKind, Scalar, Unsupported, WeightScale,
};
use amx_runtime::Feature;
use amx_test_support::{random, splitmix};
use common::{backends, check};

/// The backends that run the FP8 products: the silicon code path only where CPUID reports
/// AMX-FP8.
fn runs(test: &str) -> Vec<Backend> {
    let fp8 = amx_runtime::detect().amx_fp8;
    backends(test)
        .into_iter()
        .filter(|&b| b != Backend::Hardware || fp8)
        .collect()
}

/// Edge sizes in M and N (one tile, one past it, one past the 32 x 32 micro-tile, a full
/// micro-tile and an edge), and K (one element, one short of a k-step, one step, a tail of 2
/// after two steps), both modes, padding, 1 and 2 threads.
fn shapes<P: Precision>(test: &str)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    const EDGES: [usize; 4] = [1, 17, 32, 40];
    for backend in runs(test) {
        let mut i = 0u64;
        for m in EDGES {
            for n in EDGES {
                for k in [1, 63, 64, 130] {
                    let mode = [Mode::Overwrite, Mode::Accumulate][i as usize % 2];
                    let threads = 1 + (i as usize / 2 % 2);
                    check::<P>(backend, m, n, k, threads, mode, i as usize % 3, i);
                    i += 1;
                }
            }
        }
    }
}

#[test]
fn bf8_matches_the_reference() {
    shapes::<Bf8Bf8>("bf8_matches_the_reference");
}

#[test]
fn hf8_matches_the_reference() {
    shapes::<Hf8Hf8>("hf8_matches_the_reference");
}

#[test]
fn bf8hf8_matches_the_reference() {
    shapes::<Bf8Hf8>("bf8hf8_matches_the_reference");
}

#[test]
fn hf8bf8_matches_the_reference() {
    shapes::<Hf8Bf8>("hf8bf8_matches_the_reference");
}

/// A random finite FP8 encoding of any magnitude (denormals included): what makes the order
/// and the grouping of the sums matter.
fn finite<T: Scalar>(bits: u8, from_bits: fn(u8) -> T) -> T {
    let x = from_bits(bits);
    if x.to_f64().is_finite() {
        x
    } else {
        from_bits(bits & 0x83) // a denormal of the same sign
    }
}

/// The instructions' sums for one output, in plain `f32` arithmetic (docs/semantics.md F8-3):
/// per 64 elements of K (the tail padded with zeros), the four products of each dword added in
/// pairs, each pair into its lane (even: elements 0 and 1 of the dword, odd: 2 and 3), then
/// `C + (even + odd)`. With finite FP8 inputs and a start that is not denormal nothing is
/// flushed (reference.rs proves it), so IEEE `f32` addition is the tiles' `add32`.
fn model(a_row: &[f32], b_col: &[f32], c0: f32) -> f32 {
    let k = a_row.len();
    let mut c = c0;
    for block in (0..k).step_by(64) {
        let (mut even, mut odd) = (0f32, 0f32);
        for dword in 0..16 {
            let p: Vec<f32> = (0..4)
                .map(|i| {
                    let kk = block + 4 * dword + i;
                    if kk < k {
                        a_row[kk] * b_col[kk]
                    } else {
                        0.0
                    }
                })
                .collect();
            even += p[0] + p[1];
            odd += p[2] + p[3];
        }
        c += even + odd;
    }
    c
}

/// The GEMM equals the model bit for bit: edges in M and N, a K tail, both modes, on the
/// emulator (and the silicon where it has AMX-FP8).
fn bit_exact<P: Precision<C = f32>>(test: &str, a_bits: fn(u8) -> P::A, b_bits: fn(u8) -> P::B) {
    for backend in runs(test) {
        for (i, &(m, n, k)) in [(1, 1, 1), (17, 33, 130), (32, 32, 64), (5, 40, 200)]
            .iter()
            .enumerate()
        {
            let seed = 100 + i as u64;
            let a: Vec<P::A> = (0..m * k)
                .map(|x| finite(splitmix(seed << 32 | x as u64) as u8, a_bits))
                .collect();
            let b: Vec<P::B> = (0..k * n)
                .map(|x| finite(splitmix((seed + 7) << 32 | x as u64) as u8, b_bits))
                .collect();
            let c0: Vec<f32> = (0..m * n).map(|x| x as f32 * 0.375 - 3.0).collect();
            let packed = PackedB::<P>::pack(&b, k, n, n).unwrap();
            for mode in [Mode::Overwrite, Mode::Accumulate] {
                let mut c = c0.clone();
                Gemm::new()
                    .backend(backend)
                    .mode(mode)
                    .threads(2)
                    .run(m, &a, k, &packed, &mut c, n)
                    .unwrap();
                for r in 0..m {
                    let a_row: Vec<f32> = a[r * k..(r + 1) * k]
                        .iter()
                        .map(|x| x.to_f64() as f32)
                        .collect();
                    for j in 0..n {
                        let b_col: Vec<f32> =
                            (0..k).map(|kk| b[kk * n + j].to_f64() as f32).collect();
                        let start = if mode == Mode::Accumulate {
                            c0[r * n + j]
                        } else {
                            0.0
                        };
                        let want = model(&a_row, &b_col, start);
                        assert_eq!(
                            c[r * n + j].to_bits(),
                            want.to_bits(),
                            "{} {m}x{n}x{k} {mode:?} on {backend}: C[{r}][{j}] = {} not {want}",
                            P::KIND,
                            c[r * n + j]
                        );
                    }
                }
                let start = (mode == Mode::Accumulate).then_some(&c0[..]);
                verify::<P>(m, n, k, &a, k, &b, n, start, &c, n, Outputs::All).unwrap();
            }
        }
    }
}

#[test]
fn fp8_is_bit_exact_with_the_pairwise_sums() {
    let test = "fp8_is_bit_exact_with_the_pairwise_sums";
    bit_exact::<Bf8Bf8>(test, Bf8::from_bits, Bf8::from_bits);
    bit_exact::<Hf8Hf8>(test, Hf8::from_bits, Hf8::from_bits);
    bit_exact::<Bf8Hf8>(test, Bf8::from_bits, Hf8::from_bits);
    bit_exact::<Hf8Bf8>(test, Hf8::from_bits, Bf8::from_bits);
}

/// NaN and infinite inputs: an hf8 NaN makes its row's outputs NaN, a bf8 infinity gives the
/// infinity, infinity times zero NaN; the reference accepts them by class.
#[test]
fn fp8_special_values_by_class() {
    let (m, n, k) = (3, 2, 70);
    let mut a = vec![Bf8::from_f32(1.0); m * k];
    a[0] = Bf8::from_bits(0x7C); // +inf in row 0, k = 0
    a[k + 65] = Bf8::from_bits(0x7E); // a NaN in row 1, in the K tail
    let mut b = vec![Bf8::from_f32(0.5); k * n];
    b[1] = Bf8::from_f32(0.0); // B[0][1] = 0: inf x 0 in C[0][1]
    let packed = PackedB::<Bf8Bf8>::pack(&b, k, n, n).unwrap();
    let mut c = vec![0f32; m * n];
    Gemm::new()
        .backend(Backend::Emulated)
        .run(m, &a, k, &packed, &mut c, n)
        .unwrap();
    assert_eq!(c[0], f32::INFINITY);
    assert!(c[1].is_nan() && c[2].is_nan() && c[3].is_nan());
    assert_eq!(&c[4..], &[35.0, 34.5]); // B[0][1] = 0
    verify::<Bf8Bf8>(m, n, k, &a, k, &b, n, None, &c, n, Outputs::All).unwrap();

    // hf8: 0x7F is the NaN; denormals are values (2^-9 x 2^-9 = 2^-18, exact).
    let mut a = vec![Hf8::from_bits(0x01); 2 * 4];
    a[4] = Hf8::from_bits(0xFF);
    let b = vec![Hf8::from_bits(0x01); 4];
    let packed = PackedB::<Hf8Hf8>::pack(&b, 4, 1, 1).unwrap();
    let mut c = vec![0f32; 2];
    Gemm::new()
        .backend(Backend::Emulated)
        .run(2, &a, 4, &packed, &mut c, 1)
        .unwrap();
    assert_eq!(c[0], 4.0 * 2f32.powi(-18));
    assert!(c[1].is_nan());
    verify::<Hf8Hf8>(2, 1, 4, &a, 4, &b, 1, None, &c, 1, Outputs::All).unwrap();
    // A wrong value is caught.
    c[0] = 3.0 * 2f32.powi(-18);
    assert!(verify::<Hf8Hf8>(2, 1, 4, &a, 4, &b, 1, None, &c, 1, Outputs::All).is_err());
}

/// A fused linear layer on FP8 inputs (scale, bias, GELU, bf16 output) equals the epilogue's
/// steps applied to the plain GEMM's accumulator, bit for bit; a zero point is refused, as
/// for every float precision.
#[test]
fn fp8_linear_layer_matches_the_model() {
    let (m, n, k) = (37, 41, 150);
    let a: Vec<Hf8> = random(m * k, 41);
    let b: Vec<Bf8> = random(k * n, 42);
    let bias: Vec<f32> = (0..n).map(|j| j as f32 * 0.125 - 2.0).collect();
    let packed = PackedB::<Hf8Bf8>::pack(&b, k, n, n).unwrap();
    let e = Epilogue::new()
        .alpha(0.75)
        .bias(&bias)
        .activation(Activation::GeluTanh);
    let gemm = Gemm::new().backend(Backend::Emulated).threads(2);
    let mut out = vec![bf16::ZERO; m * n];
    gemm.run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut out, m, n),
        &e,
    )
    .unwrap();
    let mut acc = vec![0f32; m * n];
    gemm.run(m, &a, k, &packed, &mut acc, n).unwrap();
    let mut model = vec![bf16::ZERO; m * n];
    linear_model::<Hf8Bf8, bf16>(
        MatRef::new(&acc, m, n),
        None,
        &e,
        MatMut::new(&mut model, m, n),
    )
    .unwrap();
    let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&out), bits(&model));

    let zp = Epilogue::new().quantized(0.5, 3, WeightScale::Tensor(1.0));
    assert!(gemm
        .run_with(
            MatRef::new(&a, m, k),
            &packed,
            MatMut::new(&mut acc, m, n),
            &zp
        )
        .is_err());
}

/// FP8 weights survive a blob, which names their precision.
#[test]
fn fp8_weights_through_a_blob() {
    let (k, n) = (70, 20);
    let b: Vec<Hf8> = (0..k * n)
        .map(|x| finite(splitmix(9 << 32 | x as u64) as u8, Hf8::from_bits))
        .collect();
    let packed = PackedB::<Hf8Hf8>::pack(&b, k, n, n).unwrap();
    let blob = packed.to_bytes();
    let back = PackedB::<Hf8Hf8>::from_bytes(&blob).unwrap();
    assert_eq!(back.to_bytes(), blob);
    assert_eq!(back.col_sums(), None);
    assert!(PackedB::<Bf8Bf8>::from_bytes(&blob).is_err());
    assert!(PackedB::<Hf8Bf8>::from_bytes(&blob).is_err());
}

/// The FP8 products on silicon that does not report AMX-FP8 are refused before C is written;
/// the emulator runs them.
#[test]
fn fp8_on_silicon_without_amx_fp8_is_refused() {
    if amx_runtime::Hardware::new().is_err() {
        amx_test_support::skip!("no silicon code path here");
    }
    if amx_runtime::detect().amx_fp8 {
        amx_test_support::skip_not_applicable!("this CPU reports AMX-FP8");
    }
    fn refused<P: Precision<C = f32>>(one_a: P::A, one_b: P::B) {
        let (m, n, k) = (20, 20, 40);
        let a = vec![one_a; m * k];
        let packed = PackedB::<P>::pack(&vec![one_b; k * n], k, n, n).unwrap();
        let mut c = vec![3f32; m * n];
        let err = Gemm::new()
            .backend(Backend::Hardware)
            .run(m, &a, k, &packed, &mut c, n)
            .unwrap_err();
        assert_eq!(
            err,
            GemmError::Unsupported(Unsupported::Feature {
                precision: P::KIND,
                feature: Feature::AmxFp8
            })
        );
        assert!(c.iter().all(|&x| x == 3.0), "{}", P::KIND);
        Gemm::new()
            .backend(Backend::Emulated)
            .run(m, &a, k, &packed, &mut c, n)
            .unwrap();
        assert!(c.iter().all(|&x| x == k as f32), "{}", P::KIND);
    }
    let (b1, h1) = (Bf8::from_f32(1.0), Hf8::from_f32(1.0));
    refused::<Bf8Bf8>(b1, b1);
    refused::<Hf8Hf8>(h1, h1);
    refused::<Bf8Hf8>(b1, h1);
    refused::<Hf8Bf8>(h1, b1);
}

#[test]
fn fp8_names() {
    for (name, kind) in [
        ("bf8", PrecisionKind::Bf8Bf8),
        ("hf8", PrecisionKind::Hf8Hf8),
        ("bf8hf8", PrecisionKind::Bf8Hf8),
        ("hf8bf8", PrecisionKind::Hf8Bf8),
    ] {
        assert_eq!(name.parse::<PrecisionKind>(), Ok(kind));
        assert_eq!(kind.name(), name);
        assert_eq!(kind.feature(), Feature::AmxFp8);
    }
    assert_eq!(PrecisionKind::Hf8Bf8.instruction(), "TDPHBF8PS");
}

#[test]
#[ignore = "run by fp8_on_the_silicon_code_path_of_a_diamond_rapids in a child process"]
fn child_fp8_silicon_code_path() {
    if !amx_test_support::in_child() {
        return;
    }
    amx_trap::install().expect("the engine runs the Diamond Rapids model here");
    amx_runtime::permit::request_permission().unwrap();
    assert!(amx_runtime::detect().amx_fp8);
    for (i, (m, n, k)) in [(1, 17, 63), (17, 40, 130), (40, 32, 64)]
        .into_iter()
        .enumerate()
    {
        let (mode, seed) = ([Mode::Overwrite, Mode::Accumulate][i % 2], i as u64);
        check::<Bf8Bf8>(Backend::Hardware, m, n, k, 1, mode, i % 3, seed);
        check::<Hf8Hf8>(Backend::Hardware, m, n, k, 2, mode, i % 3, seed);
        check::<Bf8Hf8>(Backend::Hardware, m, n, k, 1, mode, i % 3, seed);
        check::<Hf8Bf8>(Backend::Hardware, m, n, k, 1, mode, i % 3, seed);
    }
}

/// The silicon code path of the FP8 products (the micro-kernels' raw TDPBF8PS family) where the
/// trap engine runs a Diamond Rapids: on a CPU without AMX it executes every instruction, on
/// AMX silicon without AMX-FP8 it executes the FP8 products and the silicon the rest.
#[test]
fn fp8_on_the_silicon_code_path_of_a_diamond_rapids() {
    if !amx_trap::runs_here(amx_trap::Model::DiamondRapids) {
        amx_test_support::skip(
            amx_test_support::Kind::NotApplicable,
            "the trap engine does not run here, or this silicon has AMX-FP8 itself (the other \
             tests run its hardware backend)",
        );
        return;
    }
    amx_test_support::Child::new("child_fp8_silicon_code_path")
        .env("AMX_TRAP_CPU", "dmr")
        .run()
        .assert_passed();
}
