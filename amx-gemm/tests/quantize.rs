//! `amx_gemm::quantize`: every value within half a step of its dequantized value, 0 exact, the
//! range filled, the odd values (NaN, infinities, all-zero rows) handled, and the product of
//! quantized activations close to the `f32` product.

use amx_gemm::quantize::{quantize, quantize_rows, QuantParams, Quantized};
use amx_gemm::{
    Backend, Epilogue, Gemm, GemmError, Int8, MatMut, MatRef, PackedB, WeightScale, U8S8,
};
use amx_test_support::SplitMix64;

/// `rows x cols` values, row `i` spread over `[-s_i, s_i]` shifted by `shift * s_i`, with
/// magnitudes that differ from row to row by orders of magnitude.
fn data(rows: usize, cols: usize, shift: f32, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64::new(seed);
    (0..rows * cols)
        .map(|at| {
            let s = 10f32.powi((at / cols) as i32 % 7 - 3);
            ((2.0 * rng.unit() - 1.0) as f32 + shift) * s
        })
        .collect()
}

/// Every value of `x` within half a step of `scale * (q - zero_point)` (plus the rounding of
/// the division), and 0 at the zero point.
fn assert_close<T: Quantized + Into<i32>>(x: &[f32], q: &[T], p: QuantParams) {
    for (&v, &q) in x.iter().zip(q) {
        let back = p.scale * (q.into() - p.zero_point) as f32;
        let bound = p.scale * 0.5 * (1.0 + 1e-5) + v.abs() * 1e-6;
        assert!(
            (back - v).abs() <= bound,
            "{v} -> {} -> {back} ({p:?})",
            q.into()
        );
    }
    assert_eq!(T::convert(0.0, p.scale, p.zero_point).into(), p.zero_point);
}

#[test]
fn per_tensor_u8_and_i8_are_within_half_a_step() {
    let (rows, cols) = (9, 70);
    for shift in [0.0f32, 0.7, -0.9] {
        let x = data(rows, cols, shift, 1);
        let mut q8 = vec![0u8; rows * cols];
        let p = quantize(
            MatRef::new(&x, rows, cols),
            MatMut::new(&mut q8, rows, cols),
        )
        .unwrap();
        assert_close(&x, &q8, p);
        // The range is filled: its ends are 0 and 255 (or the zero point, when 0 is an end).
        assert!(q8.contains(&255) || p.zero_point == 255);
        assert!(q8.contains(&0) || p.zero_point == 0);
        let mut qi = vec![0i8; rows * cols];
        let p = quantize(
            MatRef::new(&x, rows, cols),
            MatMut::new(&mut qi, rows, cols),
        )
        .unwrap();
        assert_eq!(p.zero_point, 0);
        assert!(qi.iter().any(|&q| q.abs() == 127));
        assert_close(&x, &qi, p);
    }
}

#[test]
fn per_row_parameters_follow_each_row() {
    let (rows, cols, ld) = (12, 33, 40);
    let x = data(rows, ld, 0.3, 2);
    let mut q = vec![7u8; rows * ld];
    let (mut scales, mut zps) = (vec![0f32; rows], vec![0i32; rows]);
    quantize_rows(
        MatRef::new(&x, rows, cols).with_ld(ld),
        MatMut::new(&mut q, rows, cols).with_ld(ld),
        &mut scales,
        &mut zps,
    )
    .unwrap();
    for i in 0..rows {
        let p = QuantParams {
            scale: scales[i],
            zero_point: zps[i],
        };
        let row = i * ld..i * ld + cols;
        assert_close(&x[row.clone()], &q[row], p);
        // Only the row's own columns are written.
        assert!(q[i * ld + cols..(i + 1) * ld].iter().all(|&v| v == 7));
    }
    // Rows of different magnitudes get different scales.
    assert!(scales[0] < scales[3] && scales[3] < scales[6]);
}

#[test]
fn odd_values() {
    let x = [
        0.0f32,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        2.0,
        -1.0,
        0.0,
        0.0,
    ];
    let mut q = [0u8; 8];
    let (mut scales, mut zps) = ([0f32; 2], [0i32; 2]);
    quantize_rows(
        MatRef::new(&x, 2, 4),
        MatMut::new(&mut q, 2, 4),
        &mut scales,
        &mut zps,
    )
    .unwrap();
    // Row 0 has no finite value but 0: scale 1, zero point 0; NaN is the zero point and the
    // infinities saturate.
    assert_eq!((scales[0], zps[0]), (1.0, 0));
    assert_eq!(q[..4], [0, 0, 255, 0]);
    // Row 1 spans [-1, 2]: -1 is 0, 2 is 255, 0 is the zero point exactly.
    assert_eq!((q[4], q[5]), (255, 0));
    assert_eq!(q[6], zps[1] as u8);
    assert!((scales[1] - 3.0 / 255.0).abs() < 1e-7);
}

#[test]
fn bad_arguments_are_errors_and_write_nothing() {
    let x = vec![1.0f32; 12];
    let mut q = vec![9u8; 12];
    let err = quantize(MatRef::new(&x, 3, 4), MatMut::new(&mut q, 4, 3)).unwrap_err();
    assert!(
        matches!(err, GemmError::DimensionMismatch { .. }),
        "{err:?}"
    );
    let err = quantize(MatRef::new(&x[..11], 3, 4), MatMut::new(&mut q, 3, 4)).unwrap_err();
    assert!(
        matches!(
            err,
            GemmError::SliceTooShort {
                needed: 12,
                len: 11,
                ..
            }
        ),
        "{err:?}"
    );
    let (mut scales, mut zps) = (vec![0f32; 2], vec![0i32; 3]);
    let err = quantize_rows(
        MatRef::new(&x, 3, 4),
        MatMut::new(&mut q, 3, 4),
        &mut scales,
        &mut zps,
    )
    .unwrap_err();
    assert!(matches!(
        err,
        GemmError::DimensionMismatch {
            expected: 3,
            found: 2,
            ..
        }
    ));
    assert!(q.iter().all(|&v| v == 9));
    // No element: nothing read, whatever the slices and leading dimension.
    let mut none: [i8; 0] = [];
    let p = quantize(
        MatRef::new(&[], 3, 0).with_ld(1000),
        MatMut::new(&mut none, 3, 0).with_ld(1000),
    )
    .unwrap();
    assert_eq!(p, QuantParams::IDENTITY);
}

/// Quantized per row and multiplied with per-row dequantization, the product is the `f32`
/// product within the quantization error `sum_k |w| scale_i / 2` (the weights exact).
#[test]
fn quantized_products_approximate_the_f32_product() {
    let (m, n, k) = (10, 24, 200);
    let x = data(m, k, 0.2, 3);
    let w: Vec<i8> = (0..k * n).map(|i| (i * 7 % 15) as i8 - 7).collect();
    let gemm = Gemm::new().backend(Backend::Emulated);
    let (mut scales, mut zps) = (vec![0f32; m], vec![0i32; m]);
    let exact = |i: usize, j: usize| -> f64 {
        (0..k)
            .map(|p| f64::from(x[i * k + p]) * f64::from(w[p * n + j]))
            .sum()
    };
    let check = |y: &[f32], scales: &[f32], what: &str| {
        for i in 0..m {
            for j in 0..n {
                let mag: f64 = (0..k).map(|p| f64::from(w[p * n + j]).abs()).sum();
                let bound = mag * f64::from(scales[i]) * 0.5 * 1.001 + 1e-4 * exact(i, j).abs();
                let err = (f64::from(y[i * n + j]) - exact(i, j)).abs();
                assert!(err <= bound, "{what} ({i}, {j}): {err} > {bound}");
            }
        }
    };

    let mut xq = vec![0u8; m * k];
    quantize_rows(
        MatRef::new(&x, m, k),
        MatMut::new(&mut xq, m, k),
        &mut scales,
        &mut zps,
    )
    .unwrap();
    let packed = PackedB::<U8S8>::pack(&w, k, n, n).unwrap();
    let e = Epilogue::new().quantized_rows(&scales, Some(&zps), WeightScale::Tensor(1.0));
    let mut y = vec![0f32; m * n];
    gemm.run_with(
        MatRef::new(&xq, m, k),
        &packed,
        MatMut::new(&mut y, m, n),
        &e,
    )
    .unwrap();
    check(&y, &scales, "u8");

    let mut xi = vec![0i8; m * k];
    quantize_rows(
        MatRef::new(&x, m, k),
        MatMut::new(&mut xi, m, k),
        &mut scales,
        &mut zps,
    )
    .unwrap();
    assert!(zps.iter().all(|&z| z == 0));
    let packed = PackedB::<Int8>::pack(&w, k, n, n).unwrap();
    let e = Epilogue::new().quantized_rows(&scales, None, WeightScale::Tensor(1.0));
    gemm.run_with(
        MatRef::new(&xi, m, k),
        &packed,
        MatMut::new(&mut y, m, n),
        &e,
    )
    .unwrap();
    check(&y, &scales, "i8");
}
