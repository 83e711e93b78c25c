//! C written with streaming stores ([`CStores::Streaming`]) holds the same values as with
//! cached stores, on every backend: rows on 64-byte lines (streamed on the silicon code path),
//! rows that start mid-line or have a stride of partial lines (cached), the right edge of C,
//! both modes, one and two threads; and nothing past N is written. A fused layer's `f32` and
//! bf16 outputs, streamed by its one-pass rows, are the same bits as cached ones.

mod common;

use amx_gemm::reference::{verify, Outputs};
use amx_gemm::{
    bf16, Activation, Bf16, CStores, Epilogue, Gemm, Int8, MatMut, MatRef, Mode, Output, PackedB,
    Precision, Residual, WeightScale, U8S8,
};
use amx_test_support::random;
use common::{backends, check_with, Placed};

fn case<P: Precision>(test: &str)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    // (m, n, k, ldc, shift): whole lines (ldc a multiple of 16 elements) from a line boundary;
    // from mid-line; a stride of partial lines; a right edge (n = 40); K split over blocks.
    let shapes = [
        (64, 64, 128, 64, 0),
        (64, 64, 128, 64, 1),
        (48, 64, 64, 72, 0),
        (70, 40, 100, 48, 0),
        (33, 96, 1100, 96, 0),
    ];
    for backend in backends(test) {
        for (i, &(m, n, k, ldc, shift)) in shapes.iter().enumerate() {
            for (mode, threads) in [
                (Mode::Overwrite, 1),
                (Mode::Overwrite, 2),
                (Mode::Accumulate, 2),
            ] {
                let what = format!(
                    "{} {m}x{n}x{k} ldc {ldc} shift {shift} {mode:?} threads {threads} on {backend}",
                    P::KIND
                );
                let gemm = Gemm::new()
                    .threads(threads)
                    .backend(backend)
                    .c_stores(CStores::Streaming);
                let (pad, seed) = (ldc - n, 500 + 10 * i as u64);
                check_with::<P>(gemm, mode, (m, n, k), pad, Some(shift), seed, &what);
            }
        }
    }
}

#[test]
fn streamed_c_int8() {
    case::<Int8>("streamed_c_int8");
}

#[test]
fn streamed_c_u8s8() {
    case::<U8S8>("streamed_c_u8s8");
}

#[test]
fn streamed_c_bf16() {
    case::<Bf16>("streamed_c_bf16");
}

/// Every choice gives the same C, bit for bit, on a product large enough for
/// [`CStores::Auto`] to stream (8 MiB of C).
#[test]
fn every_choice_gives_the_same_c() {
    for backend in backends("every_choice_gives_the_same_c") {
        if backend == amx_gemm::Backend::Hardware && amx_trap::is_active() {
            amx_test_support::skip(
                amx_test_support::Kind::Hardware,
                "its hardware-backend part: a 1024 x 2048 x 64 product takes minutes on the \
                 trap engine; the shapes above run the same stores there",
            );
            continue;
        }
        let (m, n, k) = (1024, 2048, 64);
        assert!(m * n * 4 >= CStores::STREAM_MIN_BYTES);
        let a: Vec<i8> = random(m * k, 900);
        let b: Vec<i8> = random(k * n, 901);
        let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
        let mut results = Vec::new();
        for stores in [CStores::Cached, CStores::Auto, CStores::Streaming] {
            let mut c = Placed::new(&vec![0i32; m * n], 0);
            Gemm::new()
                .threads(2)
                .backend(backend)
                .c_stores(stores)
                .run(m, &a, k, &packed, c.get_mut(), n)
                .unwrap();
            results.push(c.get_mut().to_vec());
        }
        verify::<Int8>(m, n, k, &a, k, &b, n, None, &results[0], n, Outputs::All).unwrap();
        assert!(
            results[1] == results[0] && results[2] == results[0],
            "on {backend}"
        );
    }
}

/// A u8s8 layer (per-channel scales, bias, GELU, a bf16 residual) into `O`, once per choice of
/// stores and placement (from a line boundary, or one element past it): every output the same
/// bits as the cached one. (`u8` rows are half a line, never streamed.)
fn layer<O: Output + Copy + PartialEq + std::fmt::Debug>(zero: O, requantize: bool) {
    let (m, n, k) = (70, 96, 300);
    let a: Vec<u8> = random(m * k, 40);
    let b: Vec<i8> = random(k * n, 41);
    let scales: Vec<f32> = (0..n).map(|j| 0.001 + 0.0002 * (j % 7) as f32).collect();
    let bias: Vec<f32> = (0..n).map(|j| (j % 5) as f32 * 0.5 - 1.0).collect();
    let residual: Vec<bf16> = (0..m * n)
        .map(|i| bf16::from_f32((i % 13) as f32 * 0.25 - 1.5))
        .collect();
    let packed = PackedB::<U8S8>::pack(&b, k, n, n).unwrap();
    let e = Epilogue::new()
        .quantized(0.05, 3, WeightScale::Channel(&scales))
        .bias(&bias)
        .activation(Activation::GeluTanh)
        .residual(
            Residual::Bf16 {
                data: &residual,
                ld: n,
            },
            0.5,
        );
    let e = if requantize {
        e.requantize(0.02, 128)
    } else {
        e
    };
    for backend in backends("layer_outputs_streamed") {
        let mut want = None;
        for (stores, shift) in [
            (CStores::Cached, 0),
            (CStores::Streaming, 0),
            (CStores::Streaming, 1),
            (CStores::Auto, 0),
        ] {
            let mut out = Placed::new(&vec![zero; m * n], shift);
            Gemm::new()
                .threads(2)
                .backend(backend)
                .c_stores(stores)
                .run_with(
                    MatRef::new(&a, m, k),
                    &packed,
                    MatMut::new(out.get_mut(), m, n),
                    &e,
                )
                .unwrap();
            let got = out.get_mut().to_vec();
            match &want {
                None => want = Some(got),
                Some(w) => assert!(
                    *w == got,
                    "{} output, {stores:?} shift {shift} on {backend}",
                    std::any::type_name::<O>()
                ),
            }
        }
    }
}

#[test]
fn layer_outputs_streamed() {
    layer::<f32>(0.0, false);
    layer::<bf16>(bf16::from_f32(0.0), false);
    layer::<u8>(0, true);
}
