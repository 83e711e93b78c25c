//! `f32` activations to the `u8` or `i8` the int8 precisions multiply, per tensor or per row
//! (per token), with the scale and zero point the [`Epilogue`](crate::Epilogue) takes to
//! dequantize the product.
//!
//! The scheme, for a tensor or for each row:
//!
//! - `u8` (for [`U8S8`](crate::U8S8)): asymmetric. The range `[lo, hi]` spans the finite
//!   values and 0; `scale = (hi - lo) / 255` and `zero_point = rne(-lo / scale)`, so 0 is
//!   exact and the range fills `0..=255`.
//! - `i8` (for [`Int8`](crate::Int8)): symmetric. `scale = max |x| / 127`, `zero_point = 0`.
//!
//! Each value becomes `q = sat(rne(x / scale) + zero_point)`, the same conversion as the
//! epilogue's requantization (a correctly rounded `f32` division, rounding half to even,
//! saturation), so `x` is within `scale / 2` of `scale * (q - zero_point)` inside the range. A
//! NaN becomes the zero point and an infinity saturates; neither widens the range. An all-zero
//! tensor or row gets `scale = 1`.
//!
//! ```
//! use amx_gemm::quantize::quantize_rows;
//! use amx_gemm::{Backend, Epilogue, Gemm, MatMut, MatRef, PackedB, WeightScale, U8S8};
//!
//! let (m, n, k) = (2, 3, 64);
//! let x: Vec<f32> = (0..m * k).map(|i| (i % 9) as f32 * 0.25 - 1.0).collect();
//! let mut xq = vec![0u8; m * k];
//! let (mut scales, mut zero_points) = (vec![0f32; m], vec![0i32; m]);
//! quantize_rows(MatRef::new(&x, m, k), MatMut::new(&mut xq, m, k), &mut scales, &mut zero_points)?;
//!
//! let w = vec![1i8; k * n];
//! let weights = PackedB::<U8S8>::pack(&w, k, n, n)?;
//! let e = Epilogue::new().quantized_rows(&scales, Some(&zero_points), WeightScale::Tensor(1.0));
//! let mut y = vec![0f32; m * n];
//! let gemm = Gemm::new().backend(Backend::Emulated);
//! gemm.run_with(MatRef::new(&xq, m, k), &weights, MatMut::new(&mut y, m, n), &e)?;
//! let exact: f32 = x[..k].iter().sum();
//! assert!((y[0] - exact).abs() <= k as f32 * scales[0] / 2.0);
//! # Ok::<(), amx_gemm::GemmError>(())
//! ```

use crate::epilogue::Output;
use crate::error::{check_sizes, check_slice, GemmError, Operand};
use crate::matrix::{MatMut, MatRef};

mod sealed {
    pub trait Sealed {}
}

/// The quantized element types: `u8` (asymmetric) and `i8` (symmetric). Sealed.
pub trait Quantized: Output + sealed::Sealed {
    /// The scale and zero point of values spanning `[lo, hi]` (finite, `lo <= 0 <= hi`).
    #[doc(hidden)]
    fn params(lo: f32, hi: f32) -> QuantParams;
}

impl sealed::Sealed for u8 {}
impl sealed::Sealed for i8 {}

impl Quantized for u8 {
    fn params(lo: f32, hi: f32) -> QuantParams {
        // In f64: the width of the widest f32 range does not overflow there.
        let scale = ((f64::from(hi) - f64::from(lo)) / 255.0) as f32;
        if scale <= 0.0 {
            return QuantParams::IDENTITY;
        }
        let zero_point = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as i32;
        QuantParams { scale, zero_point }
    }
}

impl Quantized for i8 {
    fn params(lo: f32, hi: f32) -> QuantParams {
        let scale = (f64::from(hi.max(-lo)) / 127.0) as f32;
        if scale <= 0.0 {
            return QuantParams::IDENTITY;
        }
        QuantParams {
            scale,
            zero_point: 0,
        }
    }
}

/// A scale and zero point: a quantized `q` stands for `scale * (q - zero_point)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuantParams {
    /// The step between consecutive quantized values.
    pub scale: f32,
    /// The quantized value that stands for 0.
    pub zero_point: i32,
}

impl QuantParams {
    /// Scale 1, zero point 0: what an all-zero tensor or row gets.
    pub const IDENTITY: QuantParams = QuantParams {
        scale: 1.0,
        zero_point: 0,
    };
}

/// The range of the finite values of `values` widened to include 0.
fn range<'x>(values: impl Iterator<Item = &'x f32>) -> (f32, f32) {
    values
        .filter(|x| x.is_finite())
        .fold((0f32, 0f32), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// Checks that `out` is `x`'s shape and that both slices hold it.
fn check<T>(x: &MatRef<'_, f32>, out: &MatMut<'_, T>) -> Result<(), GemmError> {
    check_sizes(&[
        (
            "the rows of the input and of the quantized output",
            x.rows,
            out.rows,
        ),
        (
            "the columns of the input and of the quantized output",
            x.cols,
            out.cols,
        ),
    ])?;
    check_slice(Operand::QuantizeInput, x.rows, x.cols, x.ld, x.data.len())?;
    check_slice(
        Operand::QuantizeOutput,
        out.rows,
        out.cols,
        out.ld,
        out.data.len(),
    )
}

/// Row `i` of a matrix (its `cols` elements).
fn row<T>(data: &[T], i: usize, cols: usize, ld: usize) -> &[T] {
    &data[i * ld..i * ld + cols]
}

/// Quantizes `x` (row-major, any leading dimension) into `out` with one scale and zero point
/// for the whole tensor, and returns them (for [`Epilogue::quantized`](crate::Epilogue::quantized)).
///
/// # Errors
/// [`GemmError::DimensionMismatch`] when `out` is not `x`'s shape; slice and leading-dimension
/// errors ([`Operand::QuantizeInput`], [`Operand::QuantizeOutput`]). Nothing is written then.
pub fn quantize<T: Quantized>(
    x: MatRef<'_, f32>,
    out: MatMut<'_, T>,
) -> Result<QuantParams, GemmError> {
    check(&x, &out)?;
    let (rows, cols) = (x.rows, x.cols);
    if rows == 0 || cols == 0 {
        // No element, and the slices may hold none: nothing to read or write.
        return Ok(QuantParams::IDENTITY);
    }
    let (lo, hi) = range((0..rows).flat_map(|i| row(x.data, i, cols, x.ld)));
    let params = T::params(lo, hi);
    for i in 0..rows {
        let src = row(x.data, i, cols, x.ld);
        let dst = &mut out.data[i * out.ld..i * out.ld + cols];
        for (q, &v) in dst.iter_mut().zip(src) {
            *q = T::convert(v, params.scale, params.zero_point);
        }
    }
    Ok(params)
}

/// Quantizes `x` into `out` with a scale and zero point per row (per token), written to
/// `scales[i]` and `zero_points[i]` (for
/// [`Epilogue::quantized_rows`](crate::Epilogue::quantized_rows)).
///
/// # Errors
/// As [`quantize`], and [`GemmError::DimensionMismatch`] when `scales` or `zero_points` has
/// fewer than `x.rows` elements.
pub fn quantize_rows<T: Quantized>(
    x: MatRef<'_, f32>,
    out: MatMut<'_, T>,
    scales: &mut [f32],
    zero_points: &mut [i32],
) -> Result<(), GemmError> {
    check(&x, &out)?;
    let (rows, cols) = (x.rows, x.cols);
    check_sizes(&[
        (
            "per-row scales and the rows of the input",
            rows,
            scales.len().min(rows),
        ),
        (
            "per-row zero points and the rows of the input",
            rows,
            zero_points.len().min(rows),
        ),
    ])?;
    for i in 0..rows {
        if cols == 0 {
            // An empty row, which the slices may not hold: its parameters only.
            (scales[i], zero_points[i]) = (1.0, 0);
            continue;
        }
        let src = row(x.data, i, cols, x.ld);
        let (lo, hi) = range(src.iter());
        let params = T::params(lo, hi);
        let dst = &mut out.data[i * out.ld..i * out.ld + cols];
        for (q, &v) in dst.iter_mut().zip(src) {
            *q = T::convert(v, params.scale, params.zero_point);
        }
        (scales[i], zero_points[i]) = (params.scale, params.zero_point);
    }
    Ok(())
}
