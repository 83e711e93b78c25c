//! Fused epilogues: `Gemm::run_with` against the step-by-step `f32` model (bit for bit) and the
//! `f64` reference (within the documented bound), over shapes, strides, A row-major or
//! transposed, blockings, thread counts, precisions, outputs, scales, zero points, activations
//! and residuals; the
//! requantization at its rounding and saturation boundaries; and the typed errors.

use amx_gemm::epilogue::Output;
use amx_gemm::reference::{self, linear_model, verify_linear};
use amx_gemm::Bf16;
use amx_gemm::{
    bf16, Activation, Backend, Blocking, Epilogue, EpilogueError, Gemm, GemmError, Int8, Mode,
    Operand, PackedB, Precision, Residual, WeightScale, U8S8,
};
use amx_gemm::{BRef, Batch, MatMut, MatRef};
use amx_test_support::random;
use proptest::prelude::*;

const ACTIVATIONS: [Activation; 5] = [
    Activation::Identity,
    Activation::Relu,
    Activation::GeluTanh,
    Activation::GeluErf,
    Activation::Silu,
];

/// One randomized linear-layer case.
#[derive(Clone, Debug)]
struct Case {
    m: usize,
    n: usize,
    k: usize,
    pad: usize,
    threads: usize,
    kc_steps: usize,
    activation: Activation,
    zero_point: i32,
    /// Per-row (per-token) activation scales and zero points instead of one per tensor.
    per_row: bool,
    per_channel: bool,
    bias: bool,
    residual: u8,
    out_zero_point: i32,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (1usize..80, 1usize..80, 0usize..300, 0usize..5),
        (1usize..3, 1usize..3, 0usize..5),
        (
            0i32..256,
            any::<bool>(),
            any::<bool>(),
            0u8..3,
            -20i32..20,
            any::<u64>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (m, n, k, pad),
                (threads, kc_steps, act),
                (zero_point, per_channel, bias, residual, out_zero_point, seed, per_row),
            )| Case {
                m,
                n,
                k,
                pad,
                threads,
                kc_steps,
                activation: ACTIVATIONS[act],
                zero_point,
                per_row,
                per_channel,
                bias,
                residual,
                out_zero_point,
                seed,
            },
        )
}

/// The backends the layers run on: the emulator, and the silicon code path where it can run
/// (the silicon, or the trap engine; a visible skip elsewhere). On the silicon path a full
/// panel's epilogue runs during the next micro-kernel call (the deferred path), the rest after
/// each call; the emulator's block kernels run it after each call.
fn backends() -> &'static [Backend] {
    static BACKENDS: std::sync::OnceLock<Vec<Backend>> = std::sync::OnceLock::new();
    BACKENDS.get_or_init(amx_test_support::needs::backends)
}

/// Runs `case` for precision `P` and output `O` on every backend: fused == model bit for bit,
/// and within the `f64` bound.
fn check<P: Precision, O: Output>(c: &Case) -> Result<(), TestCaseError>
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    for &backend in backends() {
        check_on::<P, O>(c, backend)?;
    }
    Ok(())
}

/// [`check`] on one backend.
fn check_on<P: Precision, O: Output>(c: &Case, backend: Backend) -> Result<(), TestCaseError>
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let (m, n, k) = (c.m, c.n, c.k);
    let (lda, ldb, ldo) = (k + c.pad, n + c.pad, n + 2 * c.pad);
    let a: Vec<P::A> = random(m * lda, c.seed);
    let b: Vec<P::B> = random(k * ldb, c.seed ^ 1);
    let int = P::KIND != amx_gemm::PrecisionKind::Bf16;
    let scales: Vec<f32> = (0..n).map(|j| 0.001 + 0.0003 * (j % 17) as f32).collect();
    let bias: Vec<f32> = (0..n).map(|j| (j % 11) as f32 * 0.25 - 1.0).collect();
    let res_f32: Vec<f32> = random::<f32>(m * ldo, c.seed ^ 2)
        .iter()
        .map(|x| x * 0.01)
        .collect();
    let res_bf16: Vec<bf16> = res_f32.iter().map(|&x| bf16::from_f32(x)).collect();
    let zp = if int { c.zero_point } else { 0 };
    let w_scale = if c.per_channel {
        WeightScale::Channel(&scales)
    } else {
        WeightScale::Tensor(0.002)
    };
    // Per-row parameters vary around the per-tensor ones, so both paths see alike magnitudes.
    let row_scales: Vec<f32> = (0..m)
        .map(|i| {
            if int {
                0.03 + 0.004 * (i % 11) as f32
            } else {
                0.5 + 0.1 * (i % 7) as f32
            }
        })
        .collect();
    let row_zps: Vec<i32> = (0..m).map(|i| (zp + 37 * i as i32) % 256).collect();
    let base = if c.per_row {
        let zps = int.then_some(&row_zps[..]);
        Epilogue::new().quantized_rows(&row_scales, zps, w_scale)
    } else {
        Epilogue::new().quantized(if int { 0.05 } else { 1.0 }, zp, w_scale)
    };
    let mut e = base
        .activation(c.activation)
        // u8 outputs centre their zero point; i8 outputs keep it near 0.
        .requantize(0.01, c.out_zero_point + if O::CODE == 2 { 128 } else { 0 });
    if c.bias {
        e = e.bias(&bias);
    }
    match c.residual {
        1 => {
            e = e.residual(
                Residual::F32 {
                    data: &res_f32,
                    ld: ldo,
                },
                0.5,
            )
        }
        2 => {
            e = e.residual(
                Residual::Bf16 {
                    data: &res_bf16,
                    ld: ldo,
                },
                -1.5,
            )
        }
        _ => {}
    }
    let packed = PackedB::<P>::pack(&b, k, n, ldb).unwrap();
    // Half the cases give A transposed (column-major, leading dimension m + pad).
    let transposed = c.seed.is_multiple_of(2);
    let ldt = m + c.pad;
    let mut at = vec![P::A::default(); k.saturating_sub(1) * ldt + m];
    for i in 0..m {
        for kk in 0..k {
            at[kk * ldt + i] = a[i * lda + kk];
        }
    }
    let (a_in, lda_in) = if transposed { (&at, ldt) } else { (&a, lda) };
    let gemm = Gemm::new()
        .backend(backend)
        .a_transposed(transposed)
        .threads(c.threads)
        .blocking(Blocking {
            kc_steps: c.kc_steps,
            mc: 32,
            nc: 32,
            ..Blocking::DEFAULT
        });
    let sentinel = O::from_f64(7.0);
    let mut out = vec![sentinel; m * ldo];
    gemm.run_with(
        MatRef::new(a_in, m, k).with_ld(lda_in),
        &packed,
        MatMut::new(&mut out, m, n).with_ld(ldo),
        &e,
    )
    .map_err(|err| TestCaseError::fail(format!("{err}")))?;
    // The accumulator: exact for int8, the plain GEMM's for bf16 (same blocking, same sums).
    let mut acc = vec![P::C::default(); m * n];
    if int {
        reference::gemm::<P>(m, n, k, &a, lda, &b, ldb, &mut acc, n, Mode::Overwrite).unwrap();
    } else {
        gemm.run(m, a_in, lda_in, &packed, &mut acc, n).unwrap();
    }
    let mut model = vec![sentinel; m * ldo];
    linear_model::<P, O>(
        MatRef::new(&acc, m, n),
        packed.col_sums(),
        &e,
        MatMut::new(&mut model, m, n).with_ld(ldo),
    )
    .unwrap();
    for i in 0..m {
        for j in 0..ldo {
            let (got, want) = (out[i * ldo + j], model[i * ldo + j]);
            // Bit for bit (NaN cannot occur: finite inputs).
            prop_assert!(
                got.to_f64().to_bits() == want.to_f64().to_bits(),
                "({i}, {j}) of {m}x{n}x{k} on {backend:?}: fused {got:?}, model {want:?}"
            );
            if j >= n {
                prop_assert_eq!(got, sentinel, "padding column written");
            }
        }
    }
    let check = verify_linear::<P, O>(
        MatRef::new(&a, m, k).with_ld(lda),
        BRef::k_by_n(&b, k, n).with_ld(ldb),
        &e,
        MatRef::new(&out, m, n).with_ld(ldo),
    );
    prop_assert!(check.is_ok(), "{}", check.unwrap_err());
    Ok(())
}

proptest! {
    #![proptest_config(amx_test_support::proptest_config(24))]

    #[test]
    fn u8s8_layers_match_the_model_and_the_f64_reference(c in case()) {
        check::<U8S8, f32>(&c)?;
        check::<U8S8, bf16>(&c)?;
        check::<U8S8, u8>(&c)?;
    }

    #[test]
    fn s8s8_layers_match_the_model_and_the_f64_reference(c in case()) {
        check::<Int8, i8>(&c)?;
        check::<Int8, f32>(&c)?;
    }

    #[test]
    fn bf16_layers_match_the_model_and_the_f64_reference(c in case()) {
        check::<Bf16, f32>(&c)?;
        check::<Bf16, bf16>(&c)?;
    }
}

/// An int8 layer whose accumulators are chosen so that `x / scale` falls exactly on the
/// rounding and saturation boundaries of the requantization.
#[test]
fn requantization_boundaries_through_the_fused_path() {
    // A = identity-like rows picking one column of B each: acc[i][j] = B[i][j] (K = 64).
    let (m, n, k) = (40, 33, 64);
    let mut a = vec![0i8; m * k];
    for i in 0..m {
        a[i * k + i % k] = 1;
    }
    // B[i][j] runs through -128..=127; with scale 0.5 (a_scale 1, w 1) and requantization
    // scale 1: x = 0.5 acc, so odd accumulators land on .5 exactly.
    let b: Vec<i8> = (0..k * n).map(|x| (x * 7 % 256) as u8 as i8).collect();
    let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
    for (zp, lo, hi) in [(0, -128, 127), (100, -128, 127), (-100, -128, 127)] {
        let e = Epilogue::new()
            .quantized(1.0, 0, WeightScale::Tensor(0.5))
            .requantize(1.0, zp);
        let mut out = vec![0i8; m * n];
        Gemm::new()
            .backend(Backend::Emulated)
            .threads(1)
            .run_with(
                MatRef::new(&a, m, k),
                &packed,
                MatMut::new(&mut out, m, n),
                &e,
            )
            .unwrap();
        for i in 0..m {
            for j in 0..n {
                let acc = i32::from(b[(i % k) * n + j]);
                let half = f64::from(acc) * 0.5;
                let want = (half.round_ties_even() as i32 + zp).clamp(lo, hi);
                assert_eq!(i32::from(out[i * n + j]), want, "acc {acc}, zp {zp}");
            }
        }
    }
    // u8: saturation at 0 and 255 exactly.
    let e = Epilogue::new()
        .quantized(1.0, 0, WeightScale::Tensor(1.0))
        .requantize(0.5, 128);
    let mut out = vec![0u8; m * n];
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
            let acc = i32::from(b[(i % k) * n + j]);
            assert_eq!(i32::from(out[i * n + j]), (2 * acc + 128).clamp(0, 255));
        }
    }
}

#[test]
fn an_empty_k_still_applies_the_epilogue() {
    let (m, n) = (3, 40);
    let packed = PackedB::<U8S8>::pack(&[], 0, n, n).unwrap();
    let bias: Vec<f32> = (0..n).map(|j| j as f32 - 20.0).collect();
    let e = Epilogue::new()
        .quantized(0.5, 7, WeightScale::Tensor(2.0))
        .bias(&bias)
        .activation(Activation::Relu);
    let mut out = vec![f32::NAN; m * n];
    Gemm::new()
        .backend(Backend::Emulated)
        .run_with(
            MatRef::new(&[], m, 0),
            &packed,
            MatMut::new(&mut out, m, n),
            &e,
        )
        .unwrap();
    for i in 0..m {
        for j in 0..n {
            assert_eq!(out[i * n + j], (j as f32 - 20.0).max(0.0));
        }
    }
}

#[test]
fn an_empty_epilogue_is_the_plain_gemm() {
    let (m, n, k) = (70, 45, 600);
    let a: Vec<bf16> = random(m * k, 5);
    let b: Vec<bf16> = random(k * n, 6);
    let packed = PackedB::<Bf16>::pack(&b, k, n, n).unwrap();
    let gemm = Gemm::new().backend(Backend::Emulated).threads(2);
    let mut plain = vec![0f32; m * n];
    gemm.run(m, &a, k, &packed, &mut plain, n).unwrap();
    let mut fused = vec![0f32; m * n];
    gemm.run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut fused, m, n),
        &Epilogue::new(),
    )
    .unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&plain), bits(&fused));
}

#[test]
fn bad_epilogues_are_typed_errors_and_leave_the_output_alone() {
    let (m, n, k) = (2, 5, 64);
    let a = vec![1u8; m * k];
    let packed = PackedB::<U8S8>::pack(&vec![1i8; k * n], k, n, n).unwrap();
    let gemm = Gemm::new().backend(Backend::Emulated);
    let short = [1.0f32; 4];
    let run = |e: &Epilogue<'_>| {
        let mut out = vec![9u8; m * n];
        let r = gemm.run_with(
            MatRef::new(&a, m, k),
            &packed,
            MatMut::new(&mut out, m, n),
            e,
        );
        assert!(out.iter().all(|&x| x == 9), "{r:?}");
        r.unwrap_err()
    };
    assert!(matches!(
        run(&Epilogue::new().bias(&short)),
        GemmError::DimensionMismatch {
            expected: 5,
            found: 4,
            ..
        }
    ));
    assert!(matches!(
        run(&Epilogue::new().quantized(1.0, 0, WeightScale::Channel(&short))),
        GemmError::DimensionMismatch { .. }
    ));
    assert!(matches!(
        run(&Epilogue::new().requantize(0.0, 0)),
        GemmError::InvalidEpilogue(EpilogueError::RequantizeScale(0.0))
    ));
    assert!(matches!(
        run(&Epilogue::new().requantize(f32::NAN, 0)),
        GemmError::InvalidEpilogue(EpilogueError::RequantizeScale(s)) if s.is_nan()
    ));
    assert!(matches!(
        run(&Epilogue::new().requantize(1.0, 256)),
        GemmError::InvalidEpilogue(EpilogueError::OutputZeroPoint {
            zero_point: 256,
            min: 0,
            max: 255
        })
    ));
    let r = [0f32; 9];
    assert!(matches!(
        run(&Epilogue::new().residual(Residual::F32 { data: &r, ld: n }, 1.0)),
        GemmError::SliceTooShort {
            operand: Operand::Residual,
            ..
        }
    ));
    // A zero point with bf16 has nothing to compensate with.
    let pb = PackedB::<Bf16>::pack(&vec![bf16::ONE; k * n], k, n, n).unwrap();
    let mut out = vec![0f32; m * n];
    let e = Epilogue::new().quantized(1.0, 3, WeightScale::Tensor(1.0));
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
        GemmError::InvalidEpilogue(EpilogueError::ZeroPointForFloats)
    );
    // A short output is refused as C.
    let mut out = vec![0f32; m * n - 1];
    let err = gemm
        .run_with(
            MatRef::new(&a, m, k),
            &packed,
            MatMut::new(&mut out, m, n),
            &Epilogue::new(),
        )
        .unwrap_err();
    assert!(matches!(
        err,
        GemmError::SliceTooShort {
            operand: Operand::C,
            ..
        }
    ));
}

/// Batched products with B packed on the fly (both B layouts, A transposed or not) equal the
/// reference, batch by batch; bad strides are errors before anything is written.
#[test]
fn batched_products_match_the_reference() {
    use amx_gemm::BLayout;
    let (batch, m, n, k) = (3, 33, 20, 70);
    let (lda, ldb, ldc) = (k + 1, n + 2, n + 3);
    let (sa, sb, sc) = (m * lda + 5, k * ldb + 7, m * ldc + 1);
    let a: Vec<i8> = random(batch * sa, 21);
    let b: Vec<i8> = random(batch * sb, 22);
    for transposed in [false, true] {
        for layout in [BLayout::KxN, BLayout::NxK] {
            // The same matrices in the layouts asked for.
            let ldt = m + 1;
            let sat = k * ldt;
            let mut at = vec![0i8; batch * sat];
            let ldbt = k + 4;
            let sbt = n * ldbt;
            let mut bt = vec![0i8; batch * sbt];
            for q in 0..batch {
                for i in 0..m {
                    for kk in 0..k {
                        at[q * sat + kk * ldt + i] = a[q * sa + i * lda + kk];
                    }
                }
                for kk in 0..k {
                    for j in 0..n {
                        bt[q * sbt + j * ldbt + kk] = b[q * sb + kk * ldb + j];
                    }
                }
            }
            let (a_in, lda_in, sa_in) = if transposed {
                (&at, ldt, sat)
            } else {
                (&a, lda, sa)
            };
            let (b_in, ldb_in, sb_in) = match layout {
                BLayout::KxN => (&b, ldb, sb),
                BLayout::NxK => (&bt, ldbt, sbt),
            };
            let mut c = vec![0i32; batch * sc];
            let gemm = Gemm::new()
                .backend(Backend::Emulated)
                .a_transposed(transposed);
            let stats = gemm
                .run_batched::<Int8>(
                    Batch {
                        count: batch,
                        stride_a: sa_in,
                        stride_b: sb_in,
                        stride_c: sc,
                    },
                    MatRef::new(a_in, m, k).with_ld(lda_in),
                    BRef {
                        data: b_in,
                        k,
                        n,
                        ld: ldb_in,
                        layout,
                    },
                    MatMut::new(&mut c, m, n).with_ld(ldc),
                )
                .unwrap();
            assert_eq!(stats.runs.len(), batch);
            assert!(stats.pack_seconds >= 0.0 && stats.run_seconds > 0.0);
            for q in 0..batch {
                let mut want = vec![0i32; m * ldc];
                reference::gemm::<Int8>(
                    m,
                    n,
                    k,
                    &a[q * sa..],
                    lda,
                    &b[q * sb..],
                    ldb,
                    &mut want,
                    ldc,
                    Mode::Overwrite,
                )
                .unwrap();
                for i in 0..m {
                    assert_eq!(
                        &c[q * sc + i * ldc..][..n],
                        &want[i * ldc..][..n],
                        "batch {q} row {i}, transposed {transposed}, {layout:?}"
                    );
                }
            }
            // A stride that puts the last C past the slice: refused, C untouched.
            let mut c = vec![1i32; batch * sc];
            let err = gemm
                .run_batched::<Int8>(
                    Batch {
                        count: batch,
                        stride_a: sa_in,
                        stride_b: sb_in,
                        stride_c: 2 * sc,
                    },
                    MatRef::new(a_in, m, k).with_ld(lda_in),
                    BRef {
                        data: b_in,
                        k,
                        n,
                        ld: ldb_in,
                        layout,
                    },
                    MatMut::new(&mut c, m, n).with_ld(ldc),
                )
                .unwrap_err();
            assert!(matches!(
                err,
                GemmError::SliceTooShort {
                    operand: Operand::C,
                    ..
                }
            ));
            assert!(c.iter().all(|&x| x == 1));
        }
    }
    // Transposed A needs lda >= m.
    let gemm = Gemm::new().backend(Backend::Emulated).a_transposed(true);
    let packed = PackedB::<Int8>::pack(&b[..k * n], k, n, n).unwrap();
    let mut c = vec![0i32; m * n];
    let err = gemm.run(m, &a, m - 1, &packed, &mut c, n).unwrap_err();
    assert!(matches!(
        err,
        GemmError::LeadingDimension {
            operand: Operand::A,
            ..
        }
    ));
}

/// Per-row activation parameters: equal rows give the per-tensor result bit for bit, each row
/// gets its own (a row's output depends on its own scale and zero point only), a batched call
/// takes M of them per product, and too few, or zero points with bf16, are refused.
#[test]
fn per_row_activation_parameters() {
    let (m, n, k) = (40, 33, 130);
    let a: Vec<u8> = random(m * k, 5);
    let w: Vec<i8> = random(k * n, 6);
    let packed = PackedB::<U8S8>::pack(&w, k, n, n).unwrap();
    let gemm = Gemm::new().backend(Backend::Emulated).threads(2);
    let scales = [0.02f32; 64];
    let zps = [131i32; 64];
    let run = |e: &Epilogue<'_>| {
        let mut y = vec![0f32; m * n];
        gemm.run_with(MatRef::new(&a, m, k), &packed, MatMut::new(&mut y, m, n), e)
            .map(|_| y)
    };
    let tensor = run(&Epilogue::new().quantized(0.02, 131, WeightScale::Tensor(0.5))).unwrap();
    let rows = Epilogue::new().quantized_rows(&scales, Some(&zps), WeightScale::Tensor(0.5));
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&run(&rows).unwrap()), bits(&tensor));

    // Row 7 alone gets another scale and zero point: only its outputs change, to what the
    // per-tensor epilogue with those parameters gives.
    let (mut scales7, mut zps7) = (scales, zps);
    (scales7[7], zps7[7]) = (0.5, 3);
    let rows7 = Epilogue::new().quantized_rows(&scales7, Some(&zps7), WeightScale::Tensor(0.5));
    let got = run(&rows7).unwrap();
    let row7 = run(&Epilogue::new().quantized(0.5, 3, WeightScale::Tensor(0.5))).unwrap();
    for i in 0..m {
        let want = if i == 7 { &row7 } else { &tensor };
        assert_eq!(
            bits(&got[i * n..(i + 1) * n]),
            bits(&want[i * n..(i + 1) * n]),
            "row {i}"
        );
    }

    // Refusals, before any output is written.
    let short = Epilogue::new().quantized_rows(&scales[..m - 1], None, WeightScale::Tensor(1.0));
    assert_eq!(
        run(&short).unwrap_err(),
        GemmError::DimensionMismatch {
            what: "per-row activation scales and M",
            expected: m,
            found: m - 1
        }
    );
    let short_zp =
        Epilogue::new().quantized_rows(&scales, Some(&zps[..3]), WeightScale::Tensor(1.0));
    assert!(matches!(
        run(&short_zp).unwrap_err(),
        GemmError::DimensionMismatch { found: 3, .. }
    ));
    let pb = PackedB::<Bf16>::pack(&vec![bf16::ONE; k * n], k, n, n).unwrap();
    let mut out = vec![0f32; m * n];
    let bf = vec![bf16::ONE; m * k];
    let err = gemm
        .run_with(
            MatRef::new(&bf, m, k),
            &pb,
            MatMut::new(&mut out, m, n),
            &rows,
        )
        .unwrap_err();
    assert_eq!(
        err,
        GemmError::InvalidEpilogue(EpilogueError::ZeroPointForFloats)
    );
    // Scales alone are fine with bf16: per-row scaling of a float product.
    let bf_rows = Epilogue::new().quantized_rows(&scales, None, WeightScale::Tensor(2.0));
    gemm.run_with(
        MatRef::new(&bf, m, k),
        &pb,
        MatMut::new(&mut out, m, n),
        &bf_rows,
    )
    .unwrap();
    assert!(out.iter().all(|&x| x == 0.02 * 2.0 * k as f32));
    // Zero points past row M are not the call's: zeros for its rows are fine with bf16.
    let mut past = vec![0i32; m + 1];
    past[m] = 5;
    let past_m = Epilogue::new().quantized_rows(&scales, Some(&past), WeightScale::Tensor(2.0));
    gemm.run_with(
        MatRef::new(&bf, m, k),
        &pb,
        MatMut::new(&mut out, m, n),
        &past_m,
    )
    .unwrap();
    assert!(out.iter().all(|&x| x == 0.02 * 2.0 * k as f32));
}

/// A batched call checks the per-row parameters of every product before it writes the first:
/// too few for `count x M` rows, or a zero point of a later product's rows with a float
/// precision.
#[test]
fn per_row_parameters_of_every_product_are_checked_first() {
    let (count, m, n, k) = (2, 2, 3, 64);
    let batch = Batch {
        count,
        stride_a: m * k,
        stride_b: n * k,
        stride_c: m * n,
    };
    let gemm = Gemm::new().backend(Backend::Emulated);
    let a = vec![1u8; count * m * k];
    let w = vec![1i8; count * n * k];
    let scales = [1.0f32; 4];
    let short = Epilogue::new().quantized_rows(&scales[..3], None, WeightScale::Tensor(1.0));
    let mut y = vec![-1f32; count * m * n];
    let err = gemm
        .run_batched_with::<U8S8, f32>(
            batch,
            MatRef::new(&a, m, k),
            BRef::n_by_k(&w, k, n),
            MatMut::new(&mut y, m, n),
            &short,
        )
        .unwrap_err();
    assert_eq!(
        err,
        GemmError::DimensionMismatch {
            what: "per-row activation scales and count x M",
            expected: count * m,
            found: 3
        }
    );
    assert!(y.iter().all(|&x| x == -1.0), "{y:?}");
    // bf16, the zero point in the second product's rows.
    let a = vec![bf16::ONE; count * m * k];
    let w = vec![bf16::ONE; count * n * k];
    let zps = [0, 0, 0, 7];
    let later = Epilogue::new().quantized_rows(&scales, Some(&zps), WeightScale::Tensor(1.0));
    let err = gemm
        .run_batched_with::<Bf16, f32>(
            batch,
            MatRef::new(&a, m, k),
            BRef::n_by_k(&w, k, n),
            MatMut::new(&mut y, m, n),
            &later,
        )
        .unwrap_err();
    assert_eq!(
        err,
        GemmError::InvalidEpilogue(EpilogueError::ZeroPointForFloats)
    );
    assert!(y.iter().all(|&x| x == -1.0), "{y:?}");
}

/// A batched call takes M per-row parameters per product, product `p`'s from `p * M`.
#[test]
fn per_row_parameters_follow_the_batch() {
    let (count, m, n, k) = (3, 5, 7, 64);
    let a: Vec<u8> = random(count * m * k, 8);
    let w: Vec<i8> = random(count * n * k, 9);
    let scales: Vec<f32> = (0..count * m).map(|i| 0.01 * (i + 1) as f32).collect();
    let zps: Vec<i32> = (0..count * m).map(|i| (i * 17 % 256) as i32).collect();
    let e = Epilogue::new().quantized_rows(&scales, Some(&zps), WeightScale::Tensor(0.25));
    let gemm = Gemm::new().backend(Backend::Emulated);
    let mut y = vec![0f32; count * m * n];
    let batch = Batch {
        count,
        stride_a: m * k,
        stride_b: n * k,
        stride_c: m * n,
    };
    gemm.run_batched_with::<U8S8, f32>(
        batch,
        MatRef::new(&a, m, k),
        BRef::n_by_k(&w, k, n),
        MatMut::new(&mut y, m, n),
        &e,
    )
    .unwrap();
    for p in 0..count {
        let packed = PackedB::<U8S8>::pack_ref(BRef::n_by_k(&w[p * n * k..], k, n)).unwrap();
        let rows = &scales[p * m..];
        let e_p =
            Epilogue::new().quantized_rows(rows, Some(&zps[p * m..]), WeightScale::Tensor(0.25));
        let mut want = vec![0f32; m * n];
        gemm.run_with(
            MatRef::new(&a[p * m * k..], m, k),
            &packed,
            MatMut::new(&mut want, m, n),
            &e_p,
        )
        .unwrap();
        assert_eq!(&y[p * m * n..(p + 1) * m * n], &want[..], "product {p}");
    }
}

/// A `u8` or `i8` output needs an explicit requantization: without one the call is refused
/// before any output is written, by the fused path and by the references alike.
#[test]
fn an_integer_output_needs_requantize() {
    let (m, n, k) = (3, 5, 64);
    let a = vec![2u8; m * k];
    let w = vec![1i8; k * n];
    let packed = PackedB::<U8S8>::pack(&w, k, n, n).unwrap();
    let gemm = Gemm::new().backend(Backend::Emulated);
    let plain = Epilogue::new().quantized(0.1, 0, WeightScale::Tensor(0.1));
    fn refused<O: Output + PartialEq + std::fmt::Debug>(
        gemm: &Gemm,
        (a, packed, e): (MatRef<'_, u8>, &PackedB<U8S8>, &Epilogue<'_>),
        out: &mut [O],
    ) {
        let (m, n) = (a.rows, packed.n());
        let err = gemm
            .run_with(a, packed, MatMut::new(out, m, n), e)
            .unwrap_err();
        assert_eq!(
            err,
            GemmError::InvalidEpilogue(EpilogueError::RequantizeMissing)
        );
    }
    let mut y = vec![9u8; m * n];
    let mut yi = vec![9i8; m * n];
    refused(&gemm, (MatRef::new(&a, m, k), &packed, &plain), &mut y);
    refused(&gemm, (MatRef::new(&a, m, k), &packed, &plain), &mut yi);
    assert!(y.iter().all(|&x| x == 9) && yi.iter().all(|&x| x == 9));
    let acc = vec![128i32; m * n];
    let model = linear_model::<U8S8, u8>(
        MatRef::new(&acc, m, n),
        packed.col_sums(),
        &plain,
        MatMut::new(&mut y, m, n),
    );
    assert_eq!(
        model.unwrap_err(),
        GemmError::InvalidEpilogue(EpilogueError::RequantizeMissing)
    );
    // With it, the same call runs: 0.1 * 0.1 * 128 / 0.01 = 128.
    let requantized = plain.requantize(0.01, 0);
    gemm.run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut y, m, n),
        &requantized,
    )
    .unwrap();
    assert!(y.iter().all(|&x| x == 128), "{y:?}");
    // Float outputs do not need it.
    let mut f = vec![0f32; m * n];
    gemm.run_with(
        MatRef::new(&a, m, k),
        &packed,
        MatMut::new(&mut f, m, n),
        &plain,
    )
    .unwrap();
}
