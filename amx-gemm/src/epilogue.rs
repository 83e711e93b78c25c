//! Fused epilogues: what an inference linear layer computes after the product, applied to each
//! micro-tile of C while it is in L1, before the result is written once.
//!
//! [`Gemm::run_with`](crate::Gemm::run_with) computes, for every output `(i, n)`,
//!
//! ```text
//! y[i][n] = out( act( s[n] * (acc[i][n] - zp_a * colsum[n]) + bias[n] ) + beta * R[i][n] )
//! ```
//!
//! where `acc = A x B` is the tile unit's accumulator (exact `i32` for int8, `f32` for bf16),
//! `colsum[n] = sum_k B[k][n]` was computed when B was packed ([`PackedB::col_sums`](crate::PackedB::col_sums)), `R` is an
//! optional residual input of C's shape and `out` converts to the output type.
//!
//! # Order of operations and rounding
//!
//! Every step is one IEEE-754 `f32` operation rounded to nearest even (no fused multiply-add,
//! no reassociation), in this order; a step whose parameter is absent is skipped or is an exact
//! identity, so an epilogue with nothing set stores the accumulator unchanged (as `f32`):
//!
//! 1. **int8 only, in `i32` with wraparound** (as the accumulator itself):
//!    `q = acc - zp_a * colsum[n]`. Exact whenever the true value fits `i32`.
//! 2. `x = f32(q)` (int8; exact for `|q| <= 2^24`) or `x = acc` (bf16).
//! 3. `s[n] = (alpha * scale_a) * scale_w[n]`: two `f32` products, left to right (`scale_w` per
//!    channel, or one per tensor); then `x = x * s[n]`.
//!
//! `zp_a` and `scale_a` are the activations' parameters: one per tensor
//! ([`Epilogue::quantized`]), or output row `i`'s own, `zp_a[i]` and `scale_a[i]`, for
//! per-token quantization ([`Epilogue::quantized_rows`]).
//! 4. `x = x + bias[n]` (no bias: nothing is added, so `-0.0` stays `-0.0`).
//! 5. `x = act(x)` ([`Activation`]; each computed in `f32` by this crate's own functions,
//!    within the bound documented on [`Activation`], and the same on every backend).
//! 6. With a residual: `t = beta * R[i][n]` (bf16 residuals widened exactly), then
//!    `x = x + t`.
//! 7. Output: `f32` as is; bf16 rounded to nearest even (NaN stays a quiet NaN);
//!    `u8`/`i8` requantized: `v = x / scale_out` (correctly rounded `f32` division), rounded
//!    half to even to an integer, `+ zp_out`, saturated to the type's range; NaN gives `zp_out`.
//!
//! Because every step is a fixed sequence of correctly rounded operations, the result is the
//! same bit for bit on the silicon and on the emulator, for any thread count and blocking, and
//! int8 results are exact up to the documented `f32` steps: the reference
//! [`reference::linear_model`](crate::reference::linear_model) performs the same steps on the
//! exact integer product and the tests compare the two for equality.
//!
//! # Where it runs
//!
//! The micro-kernel stores the last K block of each micro-tile (at most 32 x 32) to a 4 KiB
//! scratch block that stays in L1, the epilogue reads it, and the final output is written once.
//! When K is split into several blocks (M above 32 with K above the blocking's `kc`), the
//! earlier blocks accumulate in a per-worker buffer of the worker's rows times one `nc` block of
//! columns (`i32`/`f32`), allocated before the worker configures its tiles; with M <= 32 K is
//! never split and no such buffer is used. No second pass over the output is made.
//!
//! On the tile instructions (the silicon and the trap engine) the common layer's epilogue runs
//! during the next micro-kernel call, two rows per k-step for a K block of 16 k-steps, while
//! the tile unit computes the dot products and the vector units would otherwise wait: weight
//! scales per tensor or per channel, activation parameters per tensor or per row, bias, any
//! activation, a residual, any output type, on a full panel of 32 columns, on a CPU with
//! AVX-512 F, BW, DQ and BF16 (every CPU with AMX). On AMX silicon this took the epilogue of a
//! u8s8 1024^3 GELU layer from +41-75% of the plain GEMM's time to +15-24%, and a bf16 one from
//! +53-66% to +0-6% (BENCHMARKS.md). The emulator's block
//! kernels run the same rows right after each call; per-row (per-token) activation scales went
//! from +235-253% to +40-45% at 1024^3 and from +19-22% to +4-7% at 16 x 4096 x 4096, and a
//! SiLU layer from +89-94% to +25-27% at 1024^3. The rest (per-group scales, the edge panels,
//! CPUs without AVX512_BF16) runs after each call as described below. Both paths compute the
//! same operations in the same order, so they write the same bits.
//!
//! Each step runs over whole rows of 32 values, step 5 over the whole micro-tile at once (so
//! 32 rows of independent vectors hide the latency of the activations' long chains), compiled
//! for the widest vectors the CPU has (16 lanes with AVX-512, 8 with AVX2, else the baseline).
//! Lanes never interact, and the steps above never fuse a multiply with an add, so every width
//! gives the same bits; a test runs each variant the CPU supports against the scalar functions.
//! (Inside the activations' approximations the multiply-adds are fused, `f32::mul_add`: one
//! rounding on every width, and in hardware on every CPU the vector variants run on.)
//!
//! # Group-quantized weights
//!
//! With [`WeightScale::Group`] each group of `group` consecutive rows of K (a multiple of 64)
//! has its own scale per output channel, and steps 1 to 3 become, for groups `g = 0, 1, ...`
//! in order of K:
//!
//! ```text
//! q_g = acc_g - zp_a * colsum_g[n]          (i32, wrapping; acc_g = the product over the group)
//! d_g = f32(q_g) * ((alpha * scale_a) * scale_w[g][n])
//! x   = ((d_0 + d_1) + d_2) + ...            (f32, left to right)
//! ```
//!
//! then steps 4 to 7 as above. Each group's accumulator starts from zero in the tiles; after
//! the group the four C tiles are stored to the L1 scratch block and folded into a per-worker
//! `f32` partial sum, so the cost of a group is one store of 4 KiB of accumulators and 2048
//! multiply-adds in `f32` per 32 x 32 micro-tile. A group of 64 int8 is one k-step: four tile
//! dot products (16 cycles each on the silicon, 64 cycles in all), after which the tile unit
//! waits for that store and fold, which take longer than the dot products themselves. Groups of
//! 128 and up halve that overhead at every doubling; this is why the group size must be a
//! multiple of 64 (a group smaller than one k-step would need masked partial dot products) and
//! why large groups are the fast case. The column sums per group (for a zero point) come from
//! per-k-step sums that a [`PackedB`](crate::PackedB) computes once, on the first such call, and
//! keeps; a [`PackedBView`](crate::PackedBView) of a blob computes them on every call (one extra
//! read of B).

use half::bf16;

pub use crate::activation::Activation;
use crate::deferred::{self, Deferred, Support};
use crate::error::{check_sizes, check_slice, EpilogueError, GemmError, Operand};
use crate::pack::{MR, NR};
use crate::precision::{PrecisionKind, Scalar};
use crate::tile_ops::{Mem, MemMut};

/// The weight scale of an [`Epilogue`]: per tensor, per output channel, or per group of K
/// rows and output channel. Non-exhaustive: further quantization schemes are minor releases.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum WeightScale<'a> {
    /// One scale for all of B.
    Tensor(f32),
    /// One scale per output channel `n` (at least N of them).
    Channel(&'a [f32]),
    /// Group-quantized weights (int8 precisions): the scale of rows `g * group..(g + 1) * group`
    /// of K and output channel `n` is `scales[g * N + n]`, for `g < ceil(K / group)` (the
    /// layout of GPTQ/AWQ-style `[K / group, N]` scale tensors). `group` is a positive multiple
    /// of 64; see [Group-quantized weights](self#group-quantized-weights) for the semantics
    /// and the cost.
    Group {
        /// `ceil(K / group) * N` scales, group-major.
        scales: &'a [f32],
        /// Rows of K per group: a positive multiple of 64.
        group: usize,
    },
}

/// A residual input of C's shape (`m x n`, row-major, leading dimension `ld`), added after the
/// activation ([`Epilogue::residual`]). Non-exhaustive: other element types are minor
/// releases.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Residual<'a> {
    /// `f32` elements.
    F32 {
        /// The elements, `R[i][n]` at `data[i * ld + n]`.
        data: &'a [f32],
        /// The leading dimension, at least N.
        ld: usize,
    },
    /// bf16 elements (widened exactly to `f32`).
    Bf16 {
        /// The elements, `R[i][n]` at `data[i * ld + n]`.
        data: &'a [bf16],
        /// The leading dimension, at least N.
        ld: usize,
    },
}

impl<'a> Residual<'a> {
    /// The data's length in elements and the leading dimension.
    pub(crate) fn len_and_ld(&self) -> (usize, usize) {
        match *self {
            Residual::F32 { data, ld } => (data.len(), ld),
            Residual::Bf16 { data, ld } => (data.len(), ld),
        }
    }

    /// The residual whose data starts `offset` elements later (empty past the end).
    fn offset(self, offset: usize) -> Residual<'a> {
        match self {
            Residual::F32 { data, ld } => Residual::F32 {
                data: data.get(offset..).unwrap_or(&[]),
                ld,
            },
            Residual::Bf16 { data, ld } => Residual::Bf16 {
                data: data.get(offset..).unwrap_or(&[]),
                ld,
            },
        }
    }
}

/// What [`Gemm::run_with`](crate::Gemm::run_with) applies to the product before it writes the
/// output: dequantization, bias, activation, residual, requantization. The semantics, step by
/// step with their rounding, are in the [module docs](self).
///
/// ```
/// use amx_gemm::{Activation, Backend, Epilogue, Gemm, MatMut, MatRef, PackedB, WeightScale, U8S8};
///
/// // A quantized linear layer: u8 activations (scale 0.02, zero point 128), s8 weights with
/// // per-channel scales, f32 bias, GELU, bf16 output.
/// let (m, n, k) = (2, 3, 64);
/// let x: Vec<u8> = (0..m * k).map(|i| (i * 37 % 256) as u8).collect();
/// let w: Vec<i8> = (0..k * n).map(|i| (i * 11 % 15) as i8 - 7).collect();
/// let weights = PackedB::<U8S8>::pack(&w, k, n, n)?; // column sums computed here, once
/// let scales = [0.01f32, 0.02, 0.03];
/// let bias = [0.5f32, -0.5, 0.0];
/// let epilogue = Epilogue::new()
///     .quantized(0.02, 128, WeightScale::Channel(&scales))
///     .bias(&bias)
///     .activation(Activation::GeluTanh);
/// let mut y = vec![amx_gemm::bf16::ZERO; m * n];
/// let (x, y) = (MatRef::new(&x, m, k), MatMut::new(&mut y, m, n));
/// Gemm::new().backend(Backend::Emulated).run_with(x, &weights, y, &epilogue)?;
/// # Ok::<(), amx_gemm::GemmError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epilogue<'a> {
    pub(crate) alpha: f32,
    pub(crate) a_scale: f32,
    pub(crate) a_zero_point: i32,
    /// Per-row activation scales and zero points, in place of `a_scale` / `a_zero_point`.
    pub(crate) a_rows: Option<ActivationRows<'a>>,
    pub(crate) w_scale: WeightScale<'a>,
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) activation: Activation,
    pub(crate) residual: Option<(Residual<'a>, f32)>,
    pub(crate) out_scale: f32,
    pub(crate) out_zero_point: i32,
    /// Whether [`Epilogue::requantize`] was called: a `u8` / `i8` output needs it.
    pub(crate) requantized: bool,
}

impl Default for Epilogue<'_> {
    fn default() -> Self {
        Epilogue::new()
    }
}

impl<'a> Epilogue<'a> {
    /// Nothing applied: the output is the accumulator converted to the output type.
    pub const fn new() -> Epilogue<'a> {
        Epilogue {
            alpha: 1.0,
            a_scale: 1.0,
            a_zero_point: 0,
            a_rows: None,
            w_scale: WeightScale::Tensor(1.0),
            bias: None,
            activation: Activation::Identity,
            residual: None,
            out_scale: 1.0,
            out_zero_point: 0,
            requantized: false,
        }
    }

    /// Dequantization: activations `A = a_scale * (A_q - a_zero_point)` (per tensor), weights
    /// `W = w_scale * W_q` (per tensor or per output channel). A non-zero zero point is
    /// compensated with the packed weights' column sums (int8 precisions only). Replaces
    /// per-row parameters set before.
    pub const fn quantized(
        mut self,
        a_scale: f32,
        a_zero_point: i32,
        w_scale: WeightScale<'a>,
    ) -> Epilogue<'a> {
        self.a_scale = a_scale;
        self.a_zero_point = a_zero_point;
        self.a_rows = None;
        self.w_scale = w_scale;
        self
    }

    /// Dequantization with per-row (per-token) activation parameters: row `i` of A is
    /// `scales[i] * (A_q[i] - zero_points[i])` (no zero points: 0), so step 1 subtracts
    /// `zero_points[i] * colsum[n]` and step 3's scale is `(alpha * scales[i]) * w_scale[n]`.
    /// `scales` (and `zero_points`) hold at least M values; a batched call takes M per product,
    /// product `p`'s from `p * M`. Zero points apply to int8 activations only. Replaces
    /// per-tensor parameters set before. [`quantize_rows`](crate::quantize::quantize_rows)
    /// produces such activations from `f32`.
    pub const fn quantized_rows(
        mut self,
        scales: &'a [f32],
        zero_points: Option<&'a [i32]>,
        w_scale: WeightScale<'a>,
    ) -> Epilogue<'a> {
        self.a_scale = 1.0;
        self.a_zero_point = 0;
        self.a_rows = Some(ActivationRows {
            scales,
            zero_points,
        });
        self.w_scale = w_scale;
        self
    }

    /// The activation scale and zero point of row `i` (`NaN` and 0 past the row parameters,
    /// which the call refused already).
    pub(crate) fn activation_row(&self, i: usize) -> (f32, i32) {
        match self.a_rows {
            None => (self.a_scale, self.a_zero_point),
            Some(rows) => (
                rows.scales.get(i).copied().unwrap_or(f32::NAN),
                rows.zero_points
                    .and_then(|z| z.get(i).copied())
                    .unwrap_or(0),
            ),
        }
    }

    /// Checks that per-row activation parameters cover the `m` rows of a call.
    pub(crate) fn check_rows(&self, m: usize) -> Result<(), GemmError> {
        self.check_row_count(
            m,
            [
                "per-row activation scales and M",
                "per-row activation zero points and M",
            ],
        )
    }

    /// Checks, before a batched call writes anything, what its batches' epilogues take from
    /// the per-row activation parameters (`rows`: the count times M): that they cover every
    /// row, and that a float precision (`int_acc` false) meets no zero point among them.
    pub(crate) fn check_batch_rows(&self, rows: usize, int_acc: bool) -> Result<(), GemmError> {
        self.check_row_count(
            rows,
            [
                "per-row activation scales and count x M",
                "per-row activation zero points and count x M",
            ],
        )?;
        if self.has_zero_point(rows) && !int_acc {
            return Err(EpilogueError::ZeroPointForFloats.into());
        }
        Ok(())
    }

    fn check_row_count(&self, m: usize, what: [&'static str; 2]) -> Result<(), GemmError> {
        let Some(rows) = self.a_rows else {
            return Ok(());
        };
        let zero_points = rows.zero_points.map_or(m, <[i32]>::len);
        check_sizes(&[
            (what[0], m, rows.scales.len().min(m)),
            (what[1], m, zero_points.min(m)),
        ])
    }

    /// Whether the activations of a call of `m` rows have a zero point, which needs the
    /// weights' column sums (per-row zero points past row `m` are not the call's).
    pub(crate) fn has_zero_point(&self, m: usize) -> bool {
        self.a_zero_point != 0
            || self.a_rows.is_some_and(|r| {
                r.zero_points
                    .is_some_and(|z| z.iter().take(m).any(|&x| x != 0))
            })
    }

    /// The product's factor for a plain GEMM, `y = alpha A B + beta R` (default 1); it is
    /// folded into the scale (step 3).
    pub const fn alpha(mut self, alpha: f32) -> Epilogue<'a> {
        self.alpha = alpha;
        self
    }

    /// A bias per output channel (at least N values), added before the activation.
    pub const fn bias(mut self, bias: &'a [f32]) -> Epilogue<'a> {
        self.bias = Some(bias);
        self
    }

    /// The activation function (default [`Activation::Identity`]).
    pub const fn activation(mut self, activation: Activation) -> Epilogue<'a> {
        self.activation = activation;
        self
    }

    /// A residual of C's shape, scaled by `beta`, added after the activation: the `beta C` of
    /// `alpha A B + beta C` (with C read from `residual`, not from the output).
    pub const fn residual(mut self, residual: Residual<'a>, beta: f32) -> Epilogue<'a> {
        self.residual = Some((residual, beta));
        self
    }

    /// The epilogue of one batch of a batched call: the residual starts `offset` elements in,
    /// the per-row parameters `rows` rows in.
    pub(crate) fn for_batch(&self, offset: usize, rows: usize) -> Epilogue<'a> {
        let mut e = *self;
        e.residual = e.residual.map(|(r, beta)| (r.offset(offset), beta));
        e.a_rows = e.a_rows.map(|a| ActivationRows {
            scales: a.scales.get(rows..).unwrap_or(&[]),
            zero_points: a.zero_points.map(|z| z.get(rows..).unwrap_or(&[])),
        });
        e
    }

    /// Requantization for `u8` and `i8` outputs: `q = sat(rne(x / scale) + zero_point)`.
    /// `scale` must be positive and finite and the zero point inside the output type's range.
    /// A `u8` or `i8` output needs it: there is no default scale that fits a layer, so a call
    /// without it is [`EpilogueError::RequantizeMissing`]. Float outputs ignore it.
    ///
    /// [`EpilogueError::RequantizeMissing`]: crate::EpilogueError::RequantizeMissing
    pub const fn requantize(mut self, scale: f32, zero_point: i32) -> Epilogue<'a> {
        self.out_scale = scale;
        self.out_zero_point = zero_point;
        self.requantized = true;
        self
    }

    /// Checks the output conversion for output type `O`: a `u8` / `i8` output needs a
    /// requantization with a positive, finite scale and a zero point inside its range.
    pub(crate) fn check_output<O: Output>(&self) -> Result<(), EpilogueError> {
        let (lo, hi) = match OutKind::of::<O>() {
            OutKind::U8 => (0, 255),
            OutKind::I8 => (-128, 127),
            OutKind::F32 | OutKind::Bf16 => return Ok(()),
        };
        if !self.requantized {
            return Err(EpilogueError::RequantizeMissing);
        }
        if !(self.out_scale.is_finite() && self.out_scale > 0.0) {
            return Err(EpilogueError::RequantizeScale(self.out_scale));
        }
        if !(lo..=hi).contains(&self.out_zero_point) {
            return Err(EpilogueError::OutputZeroPoint {
                zero_point: self.out_zero_point,
                min: lo,
                max: hi,
            });
        }
        Ok(())
    }
}

/// Per-row activation parameters ([`Epilogue::quantized_rows`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ActivationRows<'a> {
    pub(crate) scales: &'a [f32],
    pub(crate) zero_points: Option<&'a [i32]>,
}

mod sealed {
    pub trait Sealed {}
}

/// The kind of an [`Output`] element (its `Output::CODE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum OutKind {
    F32,
    Bf16,
    U8,
    I8,
}

impl OutKind {
    fn of<O: Output>() -> OutKind {
        match O::CODE {
            0 => OutKind::F32,
            1 => OutKind::Bf16,
            2 => OutKind::U8,
            _ => OutKind::I8,
        }
    }
}

/// An element type [`Gemm::run_with`](crate::Gemm::run_with) writes: `f32`, [`bf16`], or
/// requantized `u8` / `i8`. Sealed.
pub trait Output: Scalar + sealed::Sealed {
    /// Which of the four types this is (0 `f32`, 1 bf16, 2 `u8`, 3 `i8`).
    #[doc(hidden)]
    const CODE: u8;

    /// Step 7 for one value: `scale` and `zero_point` are the requantization's (ignored by the
    /// float types).
    fn convert(x: f32, scale: f32, zero_point: i32) -> Self;
}

impl sealed::Sealed for f32 {}
impl sealed::Sealed for bf16 {}
impl sealed::Sealed for u8 {}
impl sealed::Sealed for i8 {}

impl Output for f32 {
    const CODE: u8 = 0;
    #[inline(always)]
    fn convert(x: f32, _: f32, _: i32) -> f32 {
        x
    }
}

impl Output for bf16 {
    const CODE: u8 = 1;
    #[inline(always)]
    fn convert(x: f32, _: f32, _: i32) -> bf16 {
        bf16::from_bits(to_bf16_bits(x))
    }
}

impl Output for u8 {
    const CODE: u8 = 2;
    #[inline(always)]
    fn convert(x: f32, scale: f32, zero_point: i32) -> u8 {
        requantize(x, scale, zero_point, 0, 255) as u8
    }
}

impl Output for i8 {
    const CODE: u8 = 3;
    #[inline(always)]
    fn convert(x: f32, scale: f32, zero_point: i32) -> i8 {
        requantize(x, scale, zero_point, -128, 127) as i8
    }
}

/// `f32` to bf16 bits, rounded to nearest even; a NaN stays a (quiet) NaN.
#[inline(always)]
pub(crate) fn to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16;
    if x.is_nan() {
        ((b >> 16) as u16) | 0x0040
    } else {
        rounded
    }
}

/// Step 7 for integers: `sat(rne(x / scale) + zero_point)` into `lo..=hi`; NaN gives the zero
/// point. `zero_point` lies in `lo..=hi` (checked when the call is prepared).
#[inline(always)]
fn requantize(x: f32, scale: f32, zero_point: i32, lo: i32, hi: i32) -> i32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    const LIMIT: f32 = 4_194_304.0; // 2^22: beyond it every value saturates anyway
    let v = x / scale;
    let v = if v.is_nan() { 0.0 } else { v };
    // Clamped to +-2^22, `v + 1.5 * 2^23` lies in [2^23, 2^24), where the f32 spacing is 1: the
    // addition rounds v half to even, and the subtraction is exact.
    let v = v.clamp(-LIMIT, LIMIT);
    // The rounded value, read from the low bits of `v + MAGIC` (see `exp_f32`): integer
    // arithmetic that vectorizes, unlike a saturating `as i32`.
    let r = (v + MAGIC).to_bits().wrapping_sub(MAGIC.to_bits()) as i32;
    (r + zero_point).clamp(lo, hi)
}

/// An epilogue checked and prepared for one call: per-column parameters padded to whole panels
/// of 32 columns, so the per-row loop runs over fixed 32-element arrays (and vectorizes).
pub(crate) struct Prepared<'a> {
    /// `zp_a * colsum[n]` (wrapping), 0 past N.
    offset: Vec<i32>,
    /// `s[n]`, step 3.
    scale: Vec<f32>,
    /// `bias[n]`, or -0.0 (an exact identity for the addition) when absent or past N.
    bias: Vec<f32>,
    activation: Activation,
    residual: Option<(Residual<'a>, f32)>,
    out_scale: f32,
    out_zero_point: i32,
    /// The accumulator is `i32` (int8 precisions) rather than `f32`.
    int_acc: bool,
    out: MemMut,
    out_kind: OutKind,
    ldo: usize,
    out_len: usize,
    /// Per-K-group weight scales, when the epilogue has them.
    /// (Boxed, as `rows` is: the driver passes a `Prepared` by value.)
    grouped: Option<Box<Grouped<'a>>>,
    /// Per-row activation parameters, when the epilogue has them (`offset` and `scale` then
    /// hold no activation parameter). Boxed: most epilogues have none, and the driver passes
    /// a `Prepared` by value.
    rows: Option<Box<RowParams<'a>>>,
    /// The compiled variant of the stages that runs (the widest this CPU supports).
    isa: VectorIsa,
    /// The stages run on AVX-512 and the CPU has the rest of what [`Support`] proves (the
    /// one-instruction bf16 conversion): detected once per call.
    support: Option<Support>,
    /// Where the one-pass rows (deferred.rs) may run for this call: `support`, and the
    /// epilogue has no per-group parameters.
    one_pass: Option<Support>,
    /// Every entry of `offset` is 0.
    no_offset: bool,
    /// The one-pass rows write whole `f32` or bf16 rows on 64-byte lines with streaming stores
    /// (see [`CStores`](crate::CStores)).
    stream: bool,
}

/// The per-row part of a [`Prepared`] epilogue: what steps 1 and 3 need for any row.
struct RowParams<'a> {
    /// Activation scale per row of the call.
    scales: &'a [f32],
    /// Activation zero point per row of the call, if any.
    zero_points: Option<&'a [i32]>,
    alpha: f32,
    /// `w_scale[n]`, 0 past N (1 with per-K-group scales, which carry their own).
    weights: Vec<f32>,
    /// `colsum[n]`, 0 past N; empty without zero points.
    sums: Vec<i32>,
}

impl RowParams<'_> {
    /// The scale and zero point of row `i`, checked against the call's M when prepared.
    fn of(&self, i: usize) -> Result<(f32, i32), GemmError> {
        let scale = self.scales.get(i).ok_or_else(|| out_of_bounds(i))?;
        let zero_point = match self.zero_points {
            Some(z) => *z.get(i).ok_or_else(|| out_of_bounds(i))?,
            None => 0,
        };
        Ok((self.alpha * scale, zero_point))
    }

    /// Steps 1 and 3's per-column parameters of row `i` for the panel at column `j0`:
    /// `(alpha * scale_a[i]) * w[n]` and `zp[i] * colsum[n]`.
    fn panel(&self, i: usize, j0: usize) -> Result<([f32; NR], [i32; NR]), GemmError> {
        let (common, zero_point) = self.of(i)?;
        let weights = panel(&self.weights, j0).ok_or_else(|| out_of_bounds(j0))?;
        let mut scale = [0f32; NR];
        for (s, &w) in scale.iter_mut().zip(weights) {
            *s = common * w;
        }
        let mut offset = [0i32; NR];
        if let Some(sums) = panel(&self.sums, j0) {
            for (o, &c) in offset.iter_mut().zip(sums) {
                *o = zero_point.wrapping_mul(c);
            }
        }
        Ok((scale, offset))
    }
}

/// The per-K-group part of a [`Prepared`] epilogue: steps 1 to 3 per group.
struct Grouped<'a> {
    /// k-steps (64 int8 of K) per group.
    steps: usize,
    /// `scale_w[g][n]` at `scales[g * n_total + n]`.
    scales: &'a [f32],
    n: usize,
    /// `alpha * scale_a`.
    common: f32,
    zero_point: i32,
    /// `colsum_g[n]` at `sums[g * n + n]`; empty when the zero point is 0.
    sums: Vec<i32>,
}

impl<'a> Grouped<'a> {
    /// Checks per-K-group scales for an `n x k` B (and `m` rows of A) and gathers what the
    /// fold needs.
    fn new(
        e: &Epilogue<'a>,
        int_acc: bool,
        (m, n, k): (usize, usize, usize),
        scales: &'a [f32],
        group: usize,
        group_sums: impl FnOnce(usize) -> Result<Vec<i32>, GemmError>,
    ) -> Result<Grouped<'a>, GemmError> {
        if !int_acc {
            return Err(EpilogueError::GroupScalesForFloats.into());
        }
        if group == 0 || !group.is_multiple_of(GROUP_QUANTUM) {
            return Err(EpilogueError::GroupSize(group).into());
        }
        check_group_scales((n, k), group, scales)?;
        let steps = group / GROUP_QUANTUM;
        let sums = if e.has_zero_point(m) && k > 0 {
            group_sums(steps)?
        } else {
            Vec::new()
        };
        Ok(Grouped {
            steps,
            scales,
            n,
            common: e.alpha * e.a_scale,
            zero_point: e.a_zero_point,
            sums,
        })
    }
}

/// Checks that `scales` holds a weight scale per K-group (of `group` rows, positive) and
/// column of an `n x k` B: `ceil(k / group) * n` of them.
pub(crate) fn check_group_scales(
    (n, k): (usize, usize),
    group: usize,
    scales: &[f32],
) -> Result<(), GemmError> {
    let needed = k
        .div_ceil(group)
        .checked_mul(n)
        .ok_or(GemmError::TooLarge {
            operand: Operand::C,
        })?;
    if scales.len() < needed {
        return Err(GemmError::DimensionMismatch {
            what: "per-group weight scales and ceil(K / group) * N",
            expected: needed,
            found: scales.len(),
        });
    }
    Ok(())
}

/// One row's scales and offsets of a group for the panel whose first column is `at - g N`,
/// `cols` of them (1 and 0 past N), from the row's `(alpha * scale_a, zero_point)`.
fn group_row(
    gr: &Grouped<'_>,
    (common, zero_point): (f32, i32),
    at: usize,
    cols: usize,
) -> Result<([f32; NR], [i32; NR]), GemmError> {
    let mut scale = [1f32; NR];
    let mut offset = [0i32; NR];
    let w = gr
        .scales
        .get(at..at + cols)
        .ok_or_else(|| out_of_bounds(at))?;
    for (s, &w) in scale.iter_mut().zip(w) {
        *s = common * w;
    }
    if !gr.sums.is_empty() {
        let sums = gr
            .sums
            .get(at..at + cols)
            .ok_or_else(|| out_of_bounds(at))?;
        for (o, &c) in offset.iter_mut().zip(sums) {
            *o = zero_point.wrapping_mul(c);
        }
    }
    Ok((scale, offset))
}

/// The group size of per-K-group weight scales is a multiple of this: one k-step of int8.
const GROUP_QUANTUM: usize = 64;

impl<'a> Prepared<'a> {
    /// Checks `e` for an `m x n x k` product of `dtype` written to `out` (leading dimension
    /// `ldo`) and prepares it; allocates the per-column parameters.
    ///
    /// `group_sums(steps)` gives B's column sums per group of `steps` k-steps (called only for
    /// per-K-group scales with a zero point).
    pub(crate) fn new<O: Output>(
        e: &Epilogue<'a>,
        dtype: PrecisionKind,
        (m, n, k): (usize, usize, usize),
        col_sums: Option<&[i32]>,
        group_sums: impl FnOnce(usize) -> Result<Vec<i32>, GemmError>,
        out: &mut [O],
        ldo: usize,
    ) -> Result<Prepared<'a>, GemmError> {
        let int_acc = dtype.is_integer();
        if e.has_zero_point(m) && !int_acc {
            return Err(EpilogueError::ZeroPointForFloats.into());
        }
        e.check_rows(m)?;
        let grouped = match e.w_scale {
            WeightScale::Group { scales, group } => Some(Box::new(Grouped::new(
                e,
                int_acc,
                (m, n, k),
                scales,
                group,
                group_sums,
            )?)),
            _ => None,
        };
        let sums = match (e.has_zero_point(m), col_sums) {
            (false, _) => None,
            // Compensated per group instead.
            (_, _) if grouped.is_some() => None,
            (_, Some(s)) if s.len() == n => Some(s),
            // K = 0: every column sum is 0, and none is stored.
            (_, Some([])) if k == 0 => None,
            (_, _) => return Err(EpilogueError::MissingColumnSums.into()),
        };
        if let WeightScale::Channel(s) = e.w_scale {
            if s.len() < n {
                return Err(GemmError::DimensionMismatch {
                    what: "per-channel weight scales and N",
                    expected: n,
                    found: s.len(),
                });
            }
        }
        if let Some(b) = e.bias {
            if b.len() < n {
                return Err(GemmError::DimensionMismatch {
                    what: "bias values and N",
                    expected: n,
                    found: b.len(),
                });
            }
        }
        if let Some((r, _)) = e.residual {
            let (len, ld) = r.len_and_ld();
            check_slice(Operand::Residual, m, n, ld, len)?;
        }
        e.check_output::<O>()?;
        let padded = n.div_ceil(NR).checked_mul(NR).ok_or(GemmError::TooLarge {
            operand: Operand::C,
        })?;
        let alloc_err = || GemmError::OutOfMemory {
            bytes: padded.saturating_mul(4),
        };
        let mut offset = try_filled(padded, 0i32).ok_or_else(alloc_err)?;
        let mut scale = try_filled(padded, 0f32).ok_or_else(alloc_err)?;
        let mut bias = try_filled(padded, -0f32).ok_or_else(alloc_err)?;
        if let Some(sums) = sums {
            for (o, &s) in offset.iter_mut().zip(sums) {
                *o = e.a_zero_point.wrapping_mul(s);
            }
        }
        let common = e.alpha * e.a_scale;
        for (j, s) in scale.iter_mut().take(n).enumerate() {
            *s = match e.w_scale {
                WeightScale::Tensor(w) => common * w,
                WeightScale::Channel(w) => common * w[j],
                // Applied per group; 1 keeps K = 0 (no groups, x = 0) exact.
                WeightScale::Group { .. } => 1.0,
            };
        }
        if let Some(b) = e.bias {
            bias[..n].copy_from_slice(&b[..n]);
        }
        let rows = match e.a_rows {
            None => None,
            Some(a) => {
                let mut weights = try_filled(padded, 0f32).ok_or_else(alloc_err)?;
                for (j, w) in weights.iter_mut().take(n).enumerate() {
                    *w = match e.w_scale {
                        WeightScale::Tensor(w) => w,
                        WeightScale::Channel(w) => w[j],
                        WeightScale::Group { .. } => 1.0,
                    };
                }
                let mut row_sums = Vec::new();
                if let Some(s) = sums {
                    row_sums = try_filled(padded, 0i32).ok_or_else(alloc_err)?;
                    row_sums[..n].copy_from_slice(s);
                }
                Some(Box::new(RowParams {
                    scales: a.scales,
                    zero_points: a.zero_points,
                    alpha: e.alpha,
                    weights,
                    sums: row_sums,
                }))
            }
        };
        let out_len = out.len();
        let isa = VectorIsa::detect();
        let support = if isa == VectorIsa::Avx512 {
            Support::detect()
        } else {
            None
        };
        let one_pass = support.filter(|_| grouped.is_none());
        let no_offset = offset.iter().all(|&o| o == 0);
        Ok(Prepared {
            offset,
            scale,
            bias,
            activation: e.activation,
            residual: e.residual,
            out_scale: e.out_scale,
            out_zero_point: e.out_zero_point,
            int_acc,
            out: MemMut::new(crate::precision::bytes_of_mut(out)),
            out_kind: OutKind::of::<O>(),
            ldo,
            out_len,
            grouped,
            rows,
            isa,
            support,
            one_pass,
            no_offset,
            stream: false,
        })
    }

    /// The epilogue with its one-pass rows streaming their output (`stream`) or not; the
    /// caller then fences the streaming stores (a `c_stores::Fence`) before it returns.
    pub(crate) fn streaming(self, stream: bool) -> Prepared<'a> {
        Prepared { stream, ..self }
    }

    /// Whether the one-pass rows may stream their output.
    pub(crate) fn streams(&self) -> bool {
        self.stream
    }

    /// Whether the epilogue has per-K-group weight scales, and the k-steps per group.
    pub(crate) fn group_steps(&self) -> Option<usize> {
        self.grouped.as_ref().map(|g| g.steps)
    }

    /// Applies the epilogue to a micro-tile of `rows x cols` accumulators at `tile` (row `r`
    /// at byte `128 r`, `i32` or `f32` as the tiles store them), output rows `i0..` and columns
    /// `j0..`,
    /// and writes the output.
    ///
    /// `i0 + rows <= m` and `j0 + cols <= n`, and no other thread writes those outputs (the
    /// driver hands each worker its own rectangle of C); checked again here, so a driver bug is
    /// an error, not a write out of bounds.
    ///
    /// `block` is the working storage of the values between the stages, at least `rows` rows
    /// (its contents on entry do not matter): the caller keeps one for all its micro-tiles
    /// rather than clearing 4 KiB per call.
    #[inline]
    pub(crate) fn apply(
        &self,
        tile: &[u8],
        (rows, cols): (usize, usize),
        (i0, j0): (usize, usize),
        block: &mut [[f32; NR]],
    ) -> Result<(), GemmError> {
        let cols = cols.min(NR);
        let (Some(offset), Some(scale), Some(bias)) = (
            panel(&self.offset, j0),
            panel(&self.scale, j0),
            panel(&self.bias, j0),
        ) else {
            return Err(out_of_bounds(j0));
        };
        let acc = accumulator_rows(tile, rows)?;
        let block = block.get_mut(..rows).ok_or_else(|| out_of_bounds(rows))?;
        // Steps 1 to 4: the whole block in one call, unless rows have their own parameters.
        match &self.rows {
            None if self.int_acc => dequantize_int(self.isa, acc, offset, scale, bias, block),
            None => dequantize_float(self.isa, acc, scale, bias, block),
            Some(params) => {
                for (r, (acc, x)) in acc.iter().zip(block.iter_mut()).enumerate() {
                    let (scale, offset) = params.panel(i0 + r, j0)?;
                    let (acc, x) = (std::slice::from_ref(acc), std::slice::from_mut(x));
                    if self.int_acc {
                        dequantize_int(self.isa, acc, &offset, &scale, bias, x);
                    } else {
                        dequantize_float(self.isa, acc, &scale, bias, x);
                    }
                }
            }
        }
        self.finish_block(block, i0, j0, cols)
    }

    /// The epilogue of the micro-tile of `rows x cols` accumulators in the scratch tile
    /// `tile` (as in [`Prepared::apply`]), output rows `i0..` and columns `j0..`, prepared to
    /// run during the next micro-kernel call (see [`deferred`]); `None` where
    /// it must run now through [`Prepared::apply`]: an epilogue or a panel the deferred path
    /// does not cover, or a CPU without its instructions.
    #[inline]
    pub(crate) fn deferred(
        &self,
        tile: Mem,
        (rows, cols): (usize, usize),
        (i0, j0): (usize, usize),
    ) -> Option<Deferred<'_>> {
        let kind = match self.out_kind {
            OutKind::F32 => deferred::Out::F32,
            OutKind::Bf16 => deferred::Out::Bf16,
            OutKind::U8 | OutKind::I8 => deferred::Out::Int {
                scale: self.out_scale,
                zero_point: self.out_zero_point,
                signed: self.out_kind == OutKind::I8,
            },
        };
        let support = self.one_pass?;
        if cols != NR || rows > MR {
            return None;
        }
        let size = kind.size();
        // The byte offset of (i0, j0) and the row stride, in the output and the residual.
        let place = |ld: usize, size: usize| -> Option<(usize, usize)> {
            let at = i0.checked_mul(ld)?.checked_add(j0)?.checked_mul(size)?;
            Some((at, ld.checked_mul(size)?))
        };
        let (at, ld) = place(self.ldo, size)?;
        let addend = match self.residual {
            None => None,
            Some((residual, beta)) => {
                let (data, ld, size, bf16) = match residual {
                    Residual::F32 { data, ld } => (crate::precision::bytes_of(data), ld, 4, false),
                    Residual::Bf16 { data, ld } => (crate::precision::bytes_of(data), ld, 2, true),
                };
                let (at, ld) = place(ld, size)?;
                Some(deferred::Addend {
                    data: Mem::new(data),
                    at,
                    ld,
                    bf16,
                    beta,
                })
            }
        };
        let per_row = match &self.rows {
            None => None,
            Some(p) => Some(deferred::PerRow {
                scales: p.scales.get(i0..)?,
                zero_points: match p.zero_points {
                    Some(z) => Some(z.get(i0..)?),
                    None => None,
                },
                alpha: p.alpha,
                weights: panel(&p.weights, j0)?,
                sums: panel(&p.sums, j0),
            }),
        };
        Deferred::new(
            support,
            tile,
            rows,
            (self.out, at, ld, kind),
            self.int_acc,
            (
                panel(&self.offset, j0)?,
                panel(&self.scale, j0)?,
                panel(&self.bias, j0)?,
                self.no_offset,
            ),
            self.activation,
            addend,
            per_row,
            self.stream,
        )
    }

    /// Per-K-group scales: folds group `g`'s accumulators at `tile` (as in [`Prepared::apply`])
    /// into the `f32` partial sums at `partial` (row `r` at byte `r * partial_ld`, 32 values),
    /// steps 1 to 3 of the group and the sum; `first` starts the sums, `last` finishes them
    /// (step 4 on) and writes the output rows `i0..`, columns `j0..`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn fold(
        &self,
        tile: &[u8],
        partial: &mut [u8],
        partial_ld: usize,
        (rows, cols): (usize, usize),
        g: usize,
        (first, last): (bool, bool),
        (i0, j0): (usize, usize),
    ) -> Result<(), GemmError> {
        let Some(gr) = &self.grouped else {
            return Err(out_of_bounds(g));
        };
        let cols = cols.min(NR);
        let Some(bias) = panel(&self.bias, j0) else {
            return Err(out_of_bounds(j0));
        };
        // This group's scales and offsets for the panel, padded to 32 lanes (1 and 0 past N).
        let mut scale = [1f32; NR];
        let mut offset = [0i32; NR];
        let base = g.checked_mul(gr.n).ok_or_else(|| out_of_bounds(g))?;
        let w = gr.scales.get(base + j0..base + j0 + cols);
        for (s, &w) in scale.iter_mut().zip(w.ok_or_else(|| out_of_bounds(g))?) {
            *s = gr.common * w;
        }
        if !gr.sums.is_empty() {
            let sums = gr.sums.get(base + j0..base + j0 + cols);
            for (o, &c) in offset.iter_mut().zip(sums.ok_or_else(|| out_of_bounds(g))?) {
                *o = gr.zero_point.wrapping_mul(c);
            }
        }
        // A micro-tile has at most MR rows: more is a driver bug, reported rather than cut.
        if rows > MR {
            return Err(out_of_bounds(rows));
        }
        let mut block = [[0f32; NR]; MR];
        for (r, slot) in block.iter_mut().enumerate().take(rows) {
            let row = tile.get(r * 4 * NR..(r + 1) * 4 * NR);
            let Some(acc) = row.and_then(|s| <&[u8; 4 * NR]>::try_from(s).ok()) else {
                return Err(out_of_bounds(r));
            };
            // SAFETY: as in `apply`: 128 readable bytes read unaligned as 32 `i32`.
            let acc: [i32; NR] = unsafe { std::ptr::read_unaligned(acc.as_ptr().cast()) };
            let at = r * partial_ld;
            let Some(sums) = partial
                .get_mut(at..at + 4 * NR)
                .and_then(|s| <&mut [u8; 4 * NR]>::try_from(s).ok())
            else {
                return Err(out_of_bounds(r));
            };
            // SAFETY: 128 readable bytes read unaligned as 32 `f32` (any bit pattern is one).
            let mut x: [f32; NR] = unsafe { std::ptr::read_unaligned(sums.as_ptr().cast()) };
            let row_params;
            let (scale, offset) = match &self.rows {
                None => (&scale, &offset),
                Some(rows) => {
                    row_params = group_row(gr, rows.of(i0 + r)?, base + j0, cols)?;
                    (&row_params.0, &row_params.1)
                }
            };
            fold_group(self.isa, &acc, offset, scale, first, &mut x);
            if last {
                for (v, &b) in x.iter_mut().zip(bias) {
                    *v += b;
                }
                *slot = x;
            } else {
                // SAFETY: `sums` is 128 writable bytes; 32 `f32` written unaligned.
                unsafe { std::ptr::write_unaligned(sums.as_mut_ptr().cast(), x) };
            }
        }
        if last {
            self.finish_block(&mut block[..rows], i0, j0, cols)?;
        }
        Ok(())
    }

    /// Steps 5 to 7 for output rows `i0..i0 + block.len()`, columns `j0..j0 + cols`, from the
    /// values after step 4 (one row of `block` per output row).
    ///
    /// Step by step over the whole block rather than row by row: the activation of 32 rows is
    /// one stream of independent vectors that keeps the vector units busy, where a single row's
    /// chain of dependent operations would leave them waiting on its latency.
    #[inline]
    fn finish_block(
        &self,
        block: &mut [[f32; NR]],
        i0: usize,
        j0: usize,
        cols: usize,
    ) -> Result<(), GemmError> {
        // Step 5.
        activate(self.isa, self.activation, block);
        // Steps 6 and 7.
        let rows = block.len();
        let residual = match self.residual {
            None => ResidualRows::None,
            Some((Residual::F32 { data, ld }, beta)) => {
                ResidualRows::F32(residual_rows(data, ld, (i0, rows), (j0, cols))?, beta)
            }
            Some((Residual::Bf16 { data, ld }, beta)) => {
                ResidualRows::Bf16(residual_rows(data, ld, (i0, rows), (j0, cols))?, beta)
            }
        };
        match self.out_kind {
            OutKind::F32 => self.write::<f32>(block, &residual, i0, j0, cols),
            OutKind::Bf16 => self.write::<bf16>(block, &residual, i0, j0, cols),
            OutKind::U8 => self.write::<u8>(block, &residual, i0, j0, cols),
            OutKind::I8 => self.write::<i8>(block, &residual, i0, j0, cols),
        }
    }

    /// Steps 6 and 7 for output rows `i0..i0 + block.len()`, columns `j0..j0 + cols`: adds the
    /// residual, converts to `O` and writes the output.
    #[inline(always)]
    fn write<O: Output>(
        &self,
        block: &mut [[f32; NR]],
        residual: &ResidualRows<'_>,
        i0: usize,
        j0: usize,
        cols: usize,
    ) -> Result<(), GemmError> {
        let rows = block.len();
        // The first element of the block and one past its last, in the output; rows that do
        // not overlap (`cols <= ldo`) so that each gets a `&mut` of its own.
        let first = i0.checked_mul(self.ldo).and_then(|s| s.checked_add(j0));
        let end = (i0 + rows.saturating_sub(1))
            .checked_mul(self.ldo)
            .and_then(|s| s.checked_add(j0))
            .and_then(|s| s.checked_add(cols));
        let fits = matches!((first, end), (Some(_), Some(end)) if end <= self.out_len);
        if !fits
            || (rows > 1 && cols > self.ldo)
            || OutKind::of::<O>() != self.out_kind
            || rows > MR
        {
            return Err(out_of_bounds(i0));
        }
        let first = first.unwrap_or(0);
        let base = self.out.ptr().cast::<O>();
        let mut dst: [&mut [O]; MR] = std::array::from_fn(|r| {
            if r < rows {
                // SAFETY: `out` is the caller's `&mut [O]` of `out_len` elements (its bytes as a
                // `MemMut`, so the pointer is aligned for `O`), alive for the call, and `O` is
                // the type the buffer was made from (`out_kind`). Row `r`'s `cols` elements
                // start at `first + r * ldo`, and the last row ends at `end <= out_len`
                // (checked above), so each lies inside it; with `cols <= ldo` the rows are
                // disjoint. They belong to this worker's rectangle of C, which no other thread
                // reads or writes during the call, and no other reference to them exists
                // while `dst` lives.
                unsafe { std::slice::from_raw_parts_mut(base.add(first + r * self.ldo), cols) }
            } else {
                Default::default()
            }
        });
        #[cfg(target_arch = "x86_64")]
        if O::CODE == bf16::CODE
            && std::mem::size_of::<O>() == 2
            && matches!(residual, ResidualRows::None)
        {
            if let Some(support) = self.support {
                // SAFETY: `O` is bf16 (its code and size), so each destination row is `len`
                // 16-bit slots, and `dst` holds this worker's disjoint output rows (as above).
                unsafe { bf16_rows_native(support, block, &mut dst[..rows]) };
                return Ok(());
            }
        }
        write_block(
            self.isa,
            block,
            residual,
            self.out_scale,
            self.out_zero_point,
            &mut dst[..rows],
        );
        Ok(())
    }
}

/// Step 7 for bf16 output, one VCVTNE2PS2BF16 per row of 32 values (see
/// [`store_bf16_row`](deferred::store_bf16_row)) instead of the rounding written out per lane,
/// which took as long as the activation in a fused layer's profile.
///
/// # Safety
/// `O` is bf16.
#[cfg(target_arch = "x86_64")]
unsafe fn bf16_rows_native<O: Output>(support: Support, block: &[[f32; NR]], dst: &mut [&mut [O]]) {
    /// One row, compiled for the conversion instruction.
    ///
    /// # Safety
    /// The CPU has what `Support` proves; `d` is bf16 values.
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
    unsafe fn row<O: Output>(x: &[f32; NR], d: &mut [O]) {
        use std::arch::x86_64::*;
        // SAFETY: `x` is 32 f32, read unaligned in two halves; `d` is `d.len()` 16-bit slots
        // (bf16, the caller's contract) and the CPU has the features.
        unsafe {
            let (lo, hi) = (
                _mm512_loadu_ps(x.as_ptr()),
                _mm512_loadu_ps(x.as_ptr().add(16)),
            );
            deferred::store_bf16_row(lo, hi, d.as_mut_ptr().cast(), d.len(), false);
        }
    }
    let _ = support;
    for (x, d) in block.iter().zip(dst.iter_mut()) {
        // SAFETY: `support` proves the features; `O` is bf16 (this function's contract).
        unsafe { row(x, d) };
    }
}

/// The first `rows` rows of 32 accumulators of the stored tiles at `tile` (row `r` at byte
/// `128 r`), checked against the micro-tile's MR rows.
fn accumulator_rows(tile: &[u8], rows: usize) -> Result<&[[u8; 4 * NR]], GemmError> {
    // A micro-tile has at most MR rows: more is a driver bug, reported rather than cut.
    if rows > MR {
        return Err(out_of_bounds(rows));
    }
    let bytes = tile
        .get(..rows * 4 * NR)
        .ok_or_else(|| out_of_bounds(rows))?;
    Ok(bytes.as_chunks::<{ 4 * NR }>().0)
}

/// The residual's rows `i0..i0 + rows`, columns `j0..j0 + cols` (leading dimension `ld`), one
/// slice per row (empty past `rows`).
fn residual_rows<T>(
    data: &[T],
    ld: usize,
    (i0, rows): (usize, usize),
    (j0, cols): (usize, usize),
) -> Result<[&[T]; MR], GemmError> {
    let mut out: [&[T]; MR] = [&[]; MR];
    for (r, slot) in out.iter_mut().enumerate().take(rows) {
        let i = i0 + r;
        let row = i
            .checked_mul(ld)
            .and_then(|s| s.checked_add(j0))
            .and_then(|s| data.get(s..s.checked_add(cols)?));
        *slot = row.ok_or_else(|| out_of_bounds(i))?;
    }
    Ok(out)
}

/// A block's residual rows (as [`residual_rows`]) and `beta`.
enum ResidualRows<'r> {
    None,
    F32([&'r [f32]; MR], f32),
    Bf16([&'r [bf16]; MR], f32),
}

// Each stage is a function of its own, compiled three times (AVX-512, AVX2, baseline) by
// `vectorized!` and dispatched on the CPU's features: one straight loop over whole panels of 32
// lanes that the compiler vectorizes at the widest width the CPU has. The lanes never interact
// and the only fused multiply-adds are the explicit `mul_add`s of the activations (exactly
// rounded on every width), so every width gives the same bits.

/// Defines a function whose body is compiled for AVX-512 (F and DQ), for AVX2 and for the baseline; its
/// first argument chooses the variant, and one the CPU lacks runs the baseline instead.
macro_rules! vectorized {
    (
        $(#[$doc:meta])*
        fn $name:ident $(<$o:ident: Output>)? ($($arg:ident: $ty:ty),* $(,)?) $body:block
    ) => {
        $(#[$doc])*
        #[inline(always)]
        fn $name $(<$o: Output>)? (isa: VectorIsa, $($arg: $ty),*) {
            #[inline(always)]
            fn body $(<$o: Output>)? ($($arg: $ty),*) $body

            /// The body compiled for AVX-512F and DQ.
            ///
            /// # Safety
            /// The CPU supports AVX-512F and DQ.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512dq")]
            #[inline(never)]
            unsafe fn wide $(<$o: Output>)? ($($arg: $ty),*) {
                body $(::<$o>)? ($($arg),*)
            }

            /// The body compiled for AVX2 with FMA.
            ///
            /// # Safety
            /// The CPU supports AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[inline(never)]
            unsafe fn narrow $(<$o: Output>)? ($($arg: $ty),*) {
                body $(::<$o>)? ($($arg),*)
            }

            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU supports AVX-512F and DQ (`supported` checked it).
                VectorIsa::Avx512 if isa.supported() => unsafe { wide $(::<$o>)? ($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU supports AVX2 and FMA (`supported` checked it).
                VectorIsa::Avx2 if isa.supported() => unsafe { narrow $(::<$o>)? ($($arg),*) },
                _ => body $(::<$o>)? ($($arg),*),
            }
        }
    };
}

/// Which compiled variant of the epilogue's stages runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VectorIsa {
    /// 16-lane `f32` vectors (AVX-512F and DQ, as on every CPU with AMX).
    Avx512,
    /// 8-lane vectors (AVX2 with FMA).
    Avx2,
    /// Whatever the compilation target guarantees.
    Baseline,
}

impl VectorIsa {
    /// The widest variant this CPU runs (the standard library caches the feature tests), at
    /// most the width of the emulator's floating-point kernels: `AMX_EMULATOR_KERNELS=avx2`
    /// on an AVX-512 CPU runs the epilogue an AVX2-only CPU runs, as it runs its products.
    pub(crate) fn detect() -> VectorIsa {
        use amx_runtime::{Emulator, KernelPath};
        let allowed: &[VectorIsa] = match Emulator::float_kernels() {
            KernelPath::Avx512 => &[VectorIsa::Avx512, VectorIsa::Avx2],
            KernelPath::Portable => &[],
            _ => &[VectorIsa::Avx2],
        };
        allowed
            .iter()
            .copied()
            .find(|isa| isa.supported())
            .unwrap_or(VectorIsa::Baseline)
    }

    /// Whether this CPU runs the variant.
    #[inline(always)]
    pub(crate) fn supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            VectorIsa::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512dq")
            }
            #[cfg(target_arch = "x86_64")]
            VectorIsa::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            VectorIsa::Baseline => true,
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

vectorized! {
    /// Steps 1 to 4 for `i32` accumulators, one row of `acc` (as the tiles stored them) per row
    /// of `x`.
    fn dequantize_int(
        acc: &[[u8; 4 * NR]],
        offset: &[i32; NR],
        scale: &[f32; NR],
        bias: &[f32; NR],
        x: &mut [[f32; NR]],
    ) {
        for (acc, x) in acc.iter().zip(x) {
            let acc = lanes(acc);
            for j in 0..NR {
                x[j] = acc[j].wrapping_sub(offset[j]) as f32 * scale[j] + bias[j];
            }
        }
    }
}

vectorized! {
    /// Steps 1 to 3 of one group and the running sum, for `i32` accumulators: `first` starts
    /// the sum (`x = d`, so no `0.0 + d` turns a `-0.0` into `+0.0`).
    fn fold_group(
        acc: &[i32; NR],
        offset: &[i32; NR],
        scale: &[f32; NR],
        first: bool,
        x: &mut [f32; NR],
    ) {
        if first {
            for j in 0..NR {
                x[j] = acc[j].wrapping_sub(offset[j]) as f32 * scale[j];
            }
        } else {
            for j in 0..NR {
                x[j] += acc[j].wrapping_sub(offset[j]) as f32 * scale[j];
            }
        }
    }
}

vectorized! {
    /// Steps 2 to 4 for `f32` accumulators (their bits, as stored), one row of `acc` per row of
    /// `x`.
    fn dequantize_float(
        acc: &[[u8; 4 * NR]],
        scale: &[f32; NR],
        bias: &[f32; NR],
        x: &mut [[f32; NR]],
    ) {
        for (acc, x) in acc.iter().zip(x) {
            let acc = lanes(acc);
            for j in 0..NR {
                x[j] = f32::from_bits(acc[j] as u32) * scale[j] + bias[j];
            }
        }
    }
}

/// Step 5 over a block of rows (as [`Activation::apply`] on each value). Over the whole
/// block rather than row by row: 32 rows are one stream of independent vectors that keeps the
/// vector units busy, where one row's chain of dependent operations leaves them waiting on its
/// latency.
#[inline(always)]
fn activate(isa: VectorIsa, activation: Activation, block: &mut [[f32; NR]]) {
    crate::activation::activate(isa, activation, block.as_flattened_mut());
}

vectorized! {
    /// Steps 6 and 7 over a block: adds the residual rows (`beta r`), converts each row and
    /// writes it to its row of `dst` (`dst[r].len()` columns, at most NR).
    fn write_block<O: Output>(
        block: &mut [[f32; NR]],
        residual: &ResidualRows<'_>,
        scale: f32,
        zero_point: i32,
        dst: &mut [&mut [O]],
    ) {
        match residual {
            ResidualRows::None => {}
            ResidualRows::F32(rows, beta) => {
                for (x, row) in block.iter_mut().zip(rows) {
                    add_residual(x, row, *beta, |v| v);
                }
            }
            ResidualRows::Bf16(rows, beta) => {
                for (x, row) in block.iter_mut().zip(rows) {
                    add_residual(x, row, *beta, bf16::to_f32);
                }
            }
        }
        for (x, d) in block.iter().zip(dst.iter_mut()) {
            // By value: the output row is reached through a reference loaded from memory, so
            // the compiler cannot prove it apart from `block`, and would store lane by lane.
            let x = *x;
            // A whole panel (all but the last of a row of C) converted straight into the
            // output: through a local array and a copy, the copy's loads waited on the vector
            // stores just made (5% of a 1024^3 layer's time on AMX silicon).
            match <&mut [O; NR]>::try_from(&mut **d) {
                Ok(full) => {
                    for j in 0..NR {
                        full[j] = O::convert(x[j], scale, zero_point);
                    }
                }
                Err(_) => {
                    for (o, &v) in d.iter_mut().zip(&x) {
                        *o = O::convert(v, scale, zero_point);
                    }
                }
            }
        }
    }
}

/// `x[j] += beta * r[j]` over the row's columns (all 32 lanes at once for a whole panel).
#[inline(always)]
fn add_residual<T: Copy>(x: &mut [f32; NR], row: &[T], beta: f32, widen: impl Fn(T) -> f32) {
    match <&[T; NR]>::try_from(row) {
        Ok(full) => {
            for j in 0..NR {
                x[j] += beta * widen(full[j]);
            }
        }
        Err(_) => {
            for (v, &r) in x.iter_mut().zip(row) {
                *v += beta * widen(r);
            }
        }
    }
}

/// A stored row of 32 accumulators as `i32` lanes (the tiles store them in the machine's own
/// byte order).
#[inline(always)]
fn lanes(row: &[u8; 4 * NR]) -> [i32; NR] {
    // SAFETY: `[u8; 128]` and `[i32; 32]` have the same size, the copy is by value (no
    // alignment is needed) and every bit pattern is an `i32`.
    unsafe { std::mem::transmute::<[u8; 4 * NR], [i32; NR]>(*row) }
}

/// The `NR` elements of `v` from `at`, as an array (so loops over it need no bounds checks).
#[inline(always)]
fn panel<T>(v: &[T], at: usize) -> Option<&[T; NR]> {
    v.get(at..at.checked_add(NR)?)
        .and_then(|s| <&[T; NR]>::try_from(s).ok())
}

/// A write the driver should never ask for, reported instead of made.
fn out_of_bounds(at: usize) -> GemmError {
    GemmError::Fault(amx_runtime::Fault::OutOfBounds {
        tile: 0,
        needed: at,
        len: 0,
    })
}

/// A vector of `len` copies of `value`, or `None` when it cannot be allocated.
fn try_filled<T: Copy>(len: usize, value: T) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).ok()?;
    v.resize(len, value);
    Some(v)
}

/// The scalar model of steps 1 to 7 for one output, used by the references: the same
/// operations in the same order as the fused path.
#[allow(clippy::too_many_arguments)]
pub(crate) fn model_one<O: Output>(
    e: &Epilogue<'_>,
    int_acc: bool,
    acc: f64,
    col_sum: i32,
    (i, n): (usize, usize),
    residual: Option<f32>,
) -> O {
    let (a_scale, a_zero_point) = e.activation_row(i);
    let mut x = if int_acc {
        (acc as i64 as i32).wrapping_sub(a_zero_point.wrapping_mul(col_sum)) as f32
    } else {
        acc as f32
    };
    let w = match e.w_scale {
        WeightScale::Tensor(w) => w,
        WeightScale::Channel(w) => w.get(n).copied().unwrap_or(f32::NAN),
        // A grouped epilogue has its own model (`model_grouped`).
        WeightScale::Group { .. } => f32::NAN,
    };
    let s = (e.alpha * a_scale) * w;
    let b = e.bias.and_then(|b| b.get(n).copied()).unwrap_or(-0.0);
    x = x * s + b;
    x = e.activation.apply(x);
    if let (Some((_, beta)), Some(r)) = (e.residual, residual) {
        x += beta * r;
    }
    O::convert(x, e.out_scale, e.out_zero_point)
}

/// The scalar model of an epilogue with per-K-group scales for one output: `groups` yields,
/// per group in order of K, its exact accumulator (wrapped to `i32` as the tiles do) and its
/// column sum; then the same operations in the same order as the fused path.
pub(crate) fn model_grouped<O: Output>(
    e: &Epilogue<'_>,
    groups: impl Iterator<Item = (i32, i32)>,
    (i, n): (usize, usize),
    n_total: usize,
    residual: Option<f32>,
) -> O {
    let WeightScale::Group { scales, .. } = e.w_scale else {
        return O::convert(f32::NAN, e.out_scale, e.out_zero_point);
    };
    let (a_scale, a_zero_point) = e.activation_row(i);
    let common = e.alpha * a_scale;
    let mut x: Option<f32> = None;
    for (g, (acc, sum)) in groups.enumerate() {
        let w = scales.get(g * n_total + n).copied().unwrap_or(f32::NAN);
        let d = acc.wrapping_sub(a_zero_point.wrapping_mul(sum)) as f32 * (common * w);
        x = Some(match x {
            None => d,
            Some(x) => x + d,
        });
    }
    let b = e.bias.and_then(|b| b.get(n).copied()).unwrap_or(-0.0);
    let mut x = x.unwrap_or(0.0) + b;
    x = e.activation.apply(x);
    if let (Some((_, beta)), Some(r)) = (e.residual, residual) {
        x += beta * r;
    }
    O::convert(x, e.out_scale, e.out_zero_point)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `AMX_EMULATOR_KERNELS` caps the epilogue's vector code as it caps the emulator's
    /// products, so that an AVX-512 CPU runs what an AVX2-only CPU runs: this test runs itself
    /// again under each cap and checks the variant chosen there.
    #[test]
    fn the_kernel_cap_caps_the_epilogue() {
        const CAP: &str = "AMX_EMULATOR_KERNELS";
        const NAME: &str = "epilogue::tests::the_kernel_cap_caps_the_epilogue";
        match std::env::var(CAP).as_deref() {
            Ok("avx2") => {
                let want = if VectorIsa::Avx2.supported() {
                    VectorIsa::Avx2
                } else {
                    VectorIsa::Baseline
                };
                assert_eq!(VectorIsa::detect(), want);
                assert!(crate::deferred::Support::detect().is_none());
            }
            Ok("portable") => {
                assert_eq!(VectorIsa::detect(), VectorIsa::Baseline);
                assert!(crate::deferred::Support::detect().is_none());
            }
            Ok(_) => {}
            Err(_) => {
                for cap in ["avx2", "portable"] {
                    let exe = std::env::current_exe().expect("the test's path");
                    let out = std::process::Command::new(exe)
                        .args([NAME, "--exact"])
                        .env(CAP, cap)
                        .output()
                        .expect("the test runs itself");
                    let text = String::from_utf8_lossy(&out.stdout);
                    assert!(
                        out.status.success() && text.contains("1 passed"),
                        "under {CAP}={cap}:\n{text}{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        }
    }

    /// Values that exercise every branch of the stages: signed zeros, denormals, the ends of
    /// the f32 range, infinities, NaNs, the activations' clamps and saturations, half-way
    /// cases of the roundings, then pseudo-random bit patterns and moderate values.
    fn probe_values() -> Vec<f32> {
        let mut v = vec![
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE / 4.0,
            1e-45,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7F80_0001),
            87.5,
            -88.5,
            10.0,
            -10.0,
            44.0,
            -13.0,
            0.5,
            2.5,
            -2.5,
            1.0 + f32::EPSILON,
            4_194_304.5,
            -4_194_305.0,
        ];
        let mut x = 0x9E37_79B9_u32;
        for i in 0..2000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(if i % 2 == 0 {
                f32::from_bits(x)
            } else {
                (x % 20_001) as f32 / 1000.0 - 10.0
            });
        }
        v.resize(v.len().div_ceil(NR) * NR, 1.0);
        v
    }

    /// The one-instruction bf16 conversion writes what `to_bf16_bits` does for every probe
    /// value (denormals included, which the instruction alone reads as zero), on whole rows
    /// and on rows cut short, and nothing past a short row.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn native_bf16_conversion_gives_the_scalar_bits() {
        let Some(support) = Support::detect() else {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the one-instruction bf16 conversion was not run: the CPU lacks \
                 AVX512_BF16"
            );
            return;
        };
        let values = probe_values();
        let rows: Vec<[f32; NR]> = values
            .chunks_exact(NR)
            .map(|c| <[f32; NR]>::try_from(c).unwrap_or([0.0; NR]))
            .collect();
        // A denormal in a row of otherwise ordinary values, and one in the lane past a short
        // row's end.
        let mut rows = rows;
        rows.push([1.5; NR]);
        rows.last_mut().unwrap()[7] = f32::from_bits(0x8000_0001);
        rows.push([2.5; NR]);
        rows.last_mut().unwrap()[NR - 1] = f32::from_bits(0x0040_0000);
        for len in [NR, NR - 1, 17, 1] {
            let sentinel = bf16::from_bits(0xDEAD);
            let mut out = vec![[sentinel; NR]; rows.len()];
            let mut dst: Vec<&mut [bf16]> = out.iter_mut().map(|r| &mut r[..len]).collect();
            for (chunk, dst) in rows.chunks(MR).zip(dst.chunks_mut(MR)) {
                // SAFETY: the output type is bf16.
                unsafe { bf16_rows_native(support, chunk, dst) };
            }
            for (r, (row, got)) in rows.iter().zip(&out).enumerate() {
                for j in 0..NR {
                    let want = if j < len {
                        to_bf16_bits(row[j])
                    } else {
                        sentinel.to_bits()
                    };
                    assert_eq!(
                        got[j].to_bits(),
                        want,
                        "row {r} lane {j} of {len}: {:e} ({:#x})",
                        row[j],
                        row[j].to_bits()
                    );
                }
            }
        }
    }

    /// The deferred path (deferred.rs), which the micro-kernel runs a few rows at a time during
    /// its next call, writes the staged path's bits for every probe value as accumulator:
    /// `i32` and `f32` accumulators, with and without zero points, every activation it
    /// covers, with no residual or an `f32` or bf16 one, `f32`, bf16, `u8` and `i8` output
    /// (denormal outputs included, which take its scalar rounding; requantization at its
    /// saturation and NaN cases), on a panel that is not the first; and it refuses what it
    /// does not cover.
    #[test]
    fn deferred_rows_give_the_staged_bits() {
        let values = probe_values();
        let (m, n, ldo) = (MR + 3, 2 * NR, 2 * NR + 5);
        let scales: Vec<f32> = (0..n).map(|j| 0.001 + 0.0003 * (j % 17) as f32).collect();
        let tiny: Vec<f32> = vec![1e-40; n];
        let bias: Vec<f32> = (0..n).map(|j| (j % 11) as f32 * 0.25 - 1.0).collect();
        let sums: Vec<i32> = (0..n).map(|j| 1000 * j as i32 - 7).collect();
        // Residuals of finite values (NaN payloads from two NaN operands are not specified),
        // with infinities, signed zeros and denormals among them.
        let ld_r = n + 3;
        let special = [f32::INFINITY, -0.0, 1e-40, f32::MAX, -f32::MAX, 3.0e38];
        let res_f32: Vec<f32> = (0..m * ld_r)
            .map(|i| {
                special
                    .get(i % 97)
                    .copied()
                    .unwrap_or((i % 23) as f32 * 0.37 - 4.0)
            })
            .collect();
        let res_bf16: Vec<bf16> = res_f32.iter().map(|&x| bf16::from_f32(x)).collect();
        let residuals = [
            None,
            Some((
                Residual::F32 {
                    data: &res_f32,
                    ld: ld_r,
                },
                0.5,
            )),
            Some((
                Residual::Bf16 {
                    data: &res_bf16,
                    ld: ld_r,
                },
                -1.5,
            )),
        ];
        // `e` with the bias, requantization parameters and each residual, into every output
        // type: the number of deferred runs.
        let every_output = |e: Epilogue<'_>, dtype: PrecisionKind, tile: &[u8]| {
            let mut covered = 0;
            for residual in residuals {
                let mut e = e.bias(&bias).requantize(0.01, 3);
                if let Some((r, beta)) = residual {
                    e = e.residual(r, beta);
                }
                let shape = (m, n, ldo);
                covered += deferred_matches::<f32>(&e, dtype, &sums, tile, shape);
                covered += deferred_matches::<bf16>(&e, dtype, &sums, tile, shape);
                covered += deferred_matches::<u8>(&e, dtype, &sums, tile, shape);
                covered += deferred_matches::<i8>(&e, dtype, &sums, tile, shape);
            }
            covered
        };
        let mut covered = 0;
        for chunk in values.chunks_exact(MR * NR) {
            let tile: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
            for (dtype, zero_point, w) in [
                (PrecisionKind::U8S8, 128, &scales),
                (PrecisionKind::Int8, 0, &scales),
                (PrecisionKind::Int8, 0, &tiny),
                (PrecisionKind::Bf16, 0, &scales),
                (PrecisionKind::Bf16, 0, &tiny),
            ] {
                for activation in [
                    Activation::Identity,
                    Activation::Relu,
                    Activation::GeluTanh,
                    Activation::GeluErf,
                    Activation::Silu,
                ] {
                    let e = Epilogue::new()
                        .quantized(0.5, zero_point, WeightScale::Channel(w))
                        .activation(activation);
                    covered += every_output(e, dtype, &tile);
                }
            }
        }
        // Per-row (per-token) activation scales and zero points: each row's offsets and scales
        // made in the row's registers, against the staged path's `RowParams::panel`.
        let row_scales: Vec<f32> = (0..m)
            .map(|i| [0.02, 1e-39, 3.0, 0.0, -0.5][i % 5] + 0.001 * i as f32)
            .collect();
        let row_zps: Vec<i32> = (0..m).map(|i| [0, 128, -7, 255][i % 4]).collect();
        for chunk in values.chunks_exact(MR * NR).take(3) {
            let tile: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
            for (dtype, zps, w) in [
                (PrecisionKind::U8S8, Some(&row_zps[..]), &scales),
                (PrecisionKind::U8S8, None, &tiny),
                (PrecisionKind::Int8, None, &scales),
                (PrecisionKind::Bf16, None, &scales),
            ] {
                for activation in [Activation::Identity, Activation::GeluTanh] {
                    let e = Epilogue::new()
                        .quantized_rows(&row_scales, zps, WeightScale::Channel(w))
                        .alpha(0.75)
                        .activation(activation);
                    covered += every_output(e, dtype, &tile);
                }
            }
        }
        if covered == 0 {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the deferred epilogue was not run: the CPU lacks AVX-512 F, BW, DQ \
                 or BF16"
            );
        }
        // What the deferred path does not cover runs after the call instead.
        let mut out = vec![0f32; m * ldo];
        let tile = vec![0u8; MR * 4 * NR];
        let silu = Epilogue::new().activation(Activation::Silu);
        let residual = [0f32; 64 * 64];
        let with_residual = Epilogue::new().residual(
            Residual::F32 {
                data: &residual,
                ld: 64,
            },
            1.0,
        );
        for (e, covers) in [(silu, true), (with_residual, true), (Epilogue::new(), true)] {
            let p = Prepared::new(
                &e,
                PrecisionKind::Bf16,
                (m, n, 1),
                None,
                |_| unreachable!(),
                &mut out,
                ldo,
            )
            .unwrap();
            let full = p.deferred(Mem::new(&tile), (MR, NR), (0, 0));
            assert_eq!(full.is_some(), covers && covered > 0);
            // A short panel, or rows past the output's end.
            assert!(p.deferred(Mem::new(&tile), (MR, NR - 1), (0, 0)).is_none());
            assert!(p.deferred(Mem::new(&tile), (MR, NR), (4, NR)).is_none());
        }
    }

    /// One micro-tile (the accumulators in `tile`) at rows 3.., columns 32.. of an `m x n`
    /// output, through the staged and the deferred path: the same bits, and nothing else
    /// written. Returns 1 when the deferred path ran, 0 when this CPU lacks it.
    fn deferred_matches<O: Output + Copy + PartialEq + std::fmt::Debug>(
        e: &Epilogue<'_>,
        dtype: PrecisionKind,
        sums: &[i32],
        tile: &[u8],
        (m, n, ldo): (usize, usize, usize),
    ) -> usize {
        let sentinel = O::convert(7.0, 1.0, 0);
        let mut staged = vec![sentinel; m * ldo];
        let mut deferred = staged.clone();
        let sums = dtype.is_integer().then_some(sums);
        let (i0, j0) = (3, NR);
        let prepare = |out: &mut [O]| {
            Prepared::new(e, dtype, (m, n, 64), sums, |_| unreachable!(), out, ldo).unwrap()
        };
        let mut block = [[0f32; NR]; MR];
        prepare(&mut staged)
            .apply(tile, (MR, NR), (i0, j0), &mut block)
            .unwrap();
        let q = prepare(&mut deferred);
        let Some(d) = q.deferred(Mem::new(tile), (MR, NR), (i0, j0)) else {
            return 0;
        };
        // SAFETY: `tile` and `deferred` are alive and untouched until the comparison; as the
        // micro-kernel does, a few rows per call.
        unsafe {
            d.run(0, 2);
            d.run(2, 19);
            d.run(19, 40);
        }
        for (at, (s, d)) in staged.iter().zip(&deferred).enumerate() {
            assert_eq!(
                s.to_f64().to_bits(),
                d.to_f64().to_bits(),
                "{dtype:?} {:?} element {at}: staged {s:?}, deferred {d:?}",
                e.activation
            );
        }
        1
    }

    /// Every compiled variant of every stage gives the scalar functions' bits, so the widths
    /// are interchangeable (the fused path is compared with the scalar model elsewhere only at
    /// the width this CPU runs).
    #[test]
    fn every_vector_width_gives_the_scalar_bits() {
        let values = probe_values();
        let rows: Vec<[f32; NR]> = values
            .chunks_exact(NR)
            .map(|c| <[f32; NR]>::try_from(c).unwrap_or([0.0; NR]))
            .collect();
        let ints: Vec<[i32; NR]> = rows.iter().map(|r| r.map(|v| v.to_bits() as i32)).collect();
        let same = |what: &str, isa: VectorIsa, got: &[f32], want: &[f32]| {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{what} on {isa:?}, value {i}: {g:e} ({:#x}), want {w:e} ({:#x})",
                    g.to_bits(),
                    w.to_bits()
                );
            }
        };
        for isa in [VectorIsa::Avx512, VectorIsa::Avx2, VectorIsa::Baseline] {
            if !isa.supported() {
                // Straight to stderr, which the test harness does not capture (these tests
                // ship with the published crate, without the workspace's test-support crate).
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: the {isa:?} variant of the epilogue was not run: the CPU lacks it"
                );
                continue;
            }
            for act in [
                Activation::Identity,
                Activation::Relu,
                Activation::GeluTanh,
                Activation::GeluErf,
                Activation::Silu,
            ] {
                let mut block = rows.clone();
                activate(isa, act, &mut block);
                let want: Vec<f32> = values.iter().map(|&v| act.apply(v)).collect();
                same(&format!("{act:?}"), isa, block.as_flattened(), &want);
            }
            for (r, acc) in ints.iter().enumerate() {
                let (scale, bias) = (&rows[(r + 1) % rows.len()], &rows[(r + 2) % rows.len()]);
                let offset = &ints[(r + 3) % ints.len()];
                let stored = [acc.map(i32::to_ne_bytes).as_flattened().try_into().unwrap()];
                let mut x = [0f32; NR];
                dequantize_int(
                    isa,
                    &stored,
                    offset,
                    scale,
                    bias,
                    std::slice::from_mut(&mut x),
                );
                let want: Vec<f32> = (0..NR)
                    .map(|j| acc[j].wrapping_sub(offset[j]) as f32 * scale[j] + bias[j])
                    .collect();
                same("dequantize_int", isa, &x, &want);
                dequantize_float(isa, &stored, scale, bias, std::slice::from_mut(&mut x));
                let want: Vec<f32> = (0..NR)
                    .map(|j| f32::from_bits(acc[j] as u32) * scale[j] + bias[j])
                    .collect();
                same("dequantize_float", isa, &x, &want);
                let start = *bias;
                for first in [true, false] {
                    let mut x = start;
                    fold_group(isa, acc, offset, scale, first, &mut x);
                    let want: Vec<f32> = (0..NR)
                        .map(|j| {
                            let d = acc[j].wrapping_sub(offset[j]) as f32 * scale[j];
                            if first {
                                d
                            } else {
                                start[j] + d
                            }
                        })
                        .collect();
                    same("fold_group", isa, &x, &want);
                }
            }
            // One row through `write_block`, into a whole panel and into its first `cols`.
            fn convert<O: Output>(
                isa: VectorIsa,
                row: &[f32; NR],
                residual: &ResidualRows<'_>,
                (scale, zero_point): (f32, i32),
                cols: usize,
            ) -> Vec<O> {
                let mut out = [O::default(); NR];
                let mut dst: [&mut [O]; 1] = [&mut out[..cols]];
                write_block(isa, &mut [*row], residual, scale, zero_point, &mut dst);
                out[..cols].to_vec()
            }
            let plain = ResidualRows::None;
            for (r, row) in rows.iter().enumerate() {
                for cols in [NR, 7] {
                    let f: Vec<f32> = convert(isa, row, &plain, (1.0, 0), cols);
                    same("convert f32", isa, &f, &row[..cols]);
                    let h: Vec<bf16> = convert(isa, row, &plain, (1.0, 0), cols);
                    let want: Vec<u16> = row[..cols]
                        .iter()
                        .map(|&v| bf16::convert(v, 1.0, 0).to_bits())
                        .collect();
                    let got: Vec<u16> = h.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(got, want, "convert bf16 on {isa:?}");
                    for (scale, zp) in [(0.05f32, 3), (3.0, -7), (1e-30, 0)] {
                        let q: Vec<u8> = convert(isa, row, &plain, (scale, zp + 128), cols);
                        let want: Vec<u8> = row[..cols]
                            .iter()
                            .map(|&v| u8::convert(v, scale, zp + 128))
                            .collect();
                        assert_eq!(q, want, "requantize u8 on {isa:?}");
                        let q: Vec<i8> = convert(isa, row, &plain, (scale, zp), cols);
                        let want: Vec<i8> = row[..cols]
                            .iter()
                            .map(|&v| i8::convert(v, scale, zp))
                            .collect();
                        assert_eq!(q, want, "requantize i8 on {isa:?}");
                    }
                    // Step 6: `x + beta r`, with f32 and bf16 residuals.
                    let res = &rows[(r + 5) % rows.len()][..cols];
                    let res16: Vec<bf16> = res.iter().map(|&v| bf16::from_f32(v)).collect();
                    let beta = 0.75f32;
                    let mut with = [&[][..]; MR];
                    with[0] = res;
                    let f: Vec<f32> =
                        convert(isa, row, &ResidualRows::F32(with, beta), (1.0, 0), cols);
                    let want: Vec<f32> = (0..cols).map(|j| row[j] + beta * res[j]).collect();
                    same("f32 residual", isa, &f, &want);
                    let mut with = [&[][..]; MR];
                    with[0] = &res16;
                    let f: Vec<f32> =
                        convert(isa, row, &ResidualRows::Bf16(with, beta), (1.0, 0), cols);
                    let want: Vec<f32> = (0..cols)
                        .map(|j| row[j] + beta * res16[j].to_f32())
                        .collect();
                    same("bf16 residual", isa, &f, &want);
                }
            }
        }
    }

    #[test]
    fn bf16_rounding_matches_half() {
        for bits in (0..=u32::MAX).step_by(65_521) {
            let x = f32::from_bits(bits);
            let ours = to_bf16_bits(x);
            let theirs = bf16::from_f32(x).to_bits();
            if x.is_nan() {
                assert!(bf16::from_bits(ours).is_nan());
            } else {
                assert_eq!(ours, theirs, "{x:e}");
            }
        }
    }

    #[test]
    fn requantization_rounds_half_to_even_and_saturates() {
        let q = |x: f32| requantize(x, 1.0, 0, -128, 127);
        assert_eq!(
            [q(0.5), q(1.5), q(2.5), q(-0.5), q(-1.5), q(-2.5)],
            [0, 2, 2, 0, -2, -2]
        );
        assert_eq!(
            [q(0.49999997), q(0.50000006), q(126.5), q(127.5)],
            [0, 1, 126, 127]
        );
        assert_eq!(
            [q(-128.5), q(-129.0), q(1e30), q(-1e30)],
            [-128, -128, 127, -128]
        );
        assert_eq!(
            [q(f32::INFINITY), q(f32::NEG_INFINITY), q(f32::NAN)],
            [127, -128, 0]
        );
        let u = |x: f32| requantize(x, 0.5, 10, 0, 255);
        // x / 0.5 = 2x, then + 10.
        assert_eq!(
            [u(0.25), u(0.75), u(-5.0), u(-5.25), u(-5.5)],
            [10, 12, 0, 0, 0]
        );
        assert_eq!(
            [u(122.25), u(122.75), u(123.0), u(f32::NAN)],
            [254, 255, 255, 10]
        );
        assert_eq!(<u8 as Output>::convert(-2.75, 0.5, 10), 4);
        assert_eq!(<i8 as Output>::convert(63.75, 0.5, 0), 127);
    }
}
