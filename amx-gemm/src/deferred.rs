//! A fused epilogue that runs during the next micro-kernel call: a finished micro-tile's
//! accumulators, waiting in the scratch tile, go to the output a few rows per k-step, each row
//! in registers from the accumulators to the stored output.
//!
//! The dot products run on the tile unit and leave the vector units idle, so vector work
//! issued between them costs little: on AMX silicon (Emerald Rapids class, a C probe of a
//! micro-kernel over L1-resident tiles) one row of dequantization, GELU and bf16 conversion per
//! k-step added 4% to the k-step, two rows 29%, where the same rows after the call added 76%.
//! Run after the call, as [`Prepared::apply`](crate::epilogue::Prepared::apply) does, the
//! epilogue of a 1024^3 layer cost +32-56% over the plain GEMM.
//!
//! The per-k-step work must be small and straight: a call per k-step that sets nothing up
//! (the parameters are resolved when the micro-tile is deferred), and each row computed in
//! registers rather than stage by stage through memory as `apply` does. This covers the
//! common layer: per-tensor or per-channel weight scales with per-tensor or per-row (per-token)
//! activation parameters, bias, every activation (identity, ReLU, both GELUs, SiLU), an `f32`
//! or bf16 residual, and `f32`, bf16, `u8` or `i8` output, on a full panel of 32 columns, where
//! the CPU has the AVX-512 parts the row needs. Everything else (per-group scales, the edge
//! panels) keeps the staged path after the call. Both compute the same operations on the
//! same values, so they write the same bits (the tests compare both with the scalar model).
//!
//! The emulator's block kernels leave no idle units to fill, but the same rows right after
//! each call, one pass in registers, still beat the staged path's three passes through a block
//! in L1: on the emulator (AVX-512, Emerald Rapids class) a 512^3 GELU layer's epilogue went
//! from +6-13% to -4 to +2% of the plain GEMM's time.

use crate::activation::Activation;
#[cfg(target_arch = "x86_64")]
use crate::activation::{GateLanes, IdentityLanes, Lanes, ReluLanes, SiluLanes};
use crate::kernel::SCRATCH_ROW;
use crate::pack::NR;
use crate::tile_ops::{Mem, MemMut};

/// The output element type of a deferred epilogue.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Out {
    F32,
    Bf16,
    /// Requantized to `u8` (`signed` false) or `i8`: `sat(rne(x / scale) + zero_point)`.
    Int {
        scale: f32,
        zero_point: i32,
        signed: bool,
    },
}

/// A residual's rows for a deferred epilogue (step 6: `x += beta * r`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Addend {
    /// The residual's bytes, the byte offset of the micro-tile's first element and the row
    /// stride in bytes.
    pub data: Mem,
    pub at: usize,
    pub ld: usize,
    /// bf16 elements (else `f32`).
    pub bf16: bool,
    pub beta: f32,
}

impl Addend {
    /// Bytes of a row of 32 elements.
    fn row_bytes(&self) -> usize {
        if self.bf16 {
            2 * NR
        } else {
            4 * NR
        }
    }
}

/// Per-row (per-token) activation parameters of a deferred epilogue: row `r`'s steps 1 and 3
/// use `offset[n] = zero_points[r] * sums[n]` (wrapping) and
/// `scale[n] = (alpha * scales[r]) * weights[n]`, computed as `RowParams::panel` does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PerRow<'e> {
    /// The micro-tile's rows' activation scales (and zero points), from its first row on.
    pub scales: &'e [f32],
    pub zero_points: Option<&'e [i32]>,
    pub alpha: f32,
    /// The panel's weight scales and column sums (`None`: no zero points, offset 0).
    pub weights: &'e [f32; NR],
    pub sums: Option<&'e [i32; NR]>,
}

/// One micro-tile's epilogue, prepared by [`Prepared::deferred`](crate::epilogue::Prepared::deferred)
/// with every bound checked: [`Deferred::run`] only computes and stores.
#[derive(Clone, Copy, Debug)]
// Elsewhere than x86-64 `new` never makes one, and only the rows' vector code reads the fields.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct Deferred<'e> {
    /// The scratch tile: row `r`'s 32 accumulators at byte `r * SCRATCH_ROW`.
    tile: Mem,
    rows: usize,
    /// The output, the byte offset of the micro-tile's first element and the row stride.
    out: MemMut,
    at: usize,
    ld: usize,
    kind: Out,
    /// `i32` accumulators (else `f32`).
    int_acc: bool,
    /// The panel's `zp_a * colsum` (steps 1), scales (step 3) and bias (step 4); with
    /// `per_row`, the offsets and scales are made per row from it instead.
    offset: &'e [i32; NR],
    scale: &'e [f32; NR],
    bias: &'e [f32; NR],
    /// Every offset of the call is 0: the subtraction is skipped (it would change nothing).
    no_offset: bool,
    activation: Activation,
    addend: Option<Addend>,
    per_row: Option<PerRow<'e>>,
    /// Every output row is a whole number of 64-byte lines starting a line (`f32` or bf16):
    /// written with streaming stores.
    stream: bool,
}

impl<'e> Deferred<'e> {
    /// The epilogue of the `rows` rows of 32 accumulators in `tile`, for the output rows at
    /// byte `at + r * ld` of `out` (32 elements of `kind` each), with the panel's parameters
    /// (`no_offset`: every offset of the call is 0) and residual rows, on a CPU `support`
    /// vouches for; `None` when a row would lie outside its buffer or an output row overlap the
    /// next. With `stream`, `f32` and bf16 rows on 64-byte lines are written with streaming
    /// stores, which the caller fences (a `c_stores::Fence`) before it returns. With `per_row`,
    /// each row's offsets and scales come from it (its slices must hold `rows` values), not
    /// from the panel's.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn new(
        _support: Support,
        tile: Mem,
        rows: usize,
        (out, at, ld, kind): (MemMut, usize, usize, Out),
        int_acc: bool,
        (offset, scale, bias, no_offset): (&'e [i32; NR], &'e [f32; NR], &'e [f32; NR], bool),
        activation: Activation,
        addend: Option<Addend>,
        per_row: Option<PerRow<'e>>,
        stream: bool,
    ) -> Option<Deferred<'e>> {
        let row_bytes = NR * kind.size();
        let last = rows.checked_sub(1)?;
        let tile_end = last.checked_mul(SCRATCH_ROW)?.checked_add(SCRATCH_ROW)?;
        let out_end = last
            .checked_mul(ld)?
            .checked_add(at)?
            .checked_add(row_bytes)?;
        let fits = tile_end <= tile.len() && out_end <= out.len() && (rows == 1 || ld >= row_bytes);
        let addend_fits = addend.is_none_or(|a| {
            let end = last
                .checked_mul(a.ld)
                .and_then(|e| e.checked_add(a.at))
                .and_then(|e| e.checked_add(a.row_bytes()));
            end.is_some_and(|end| end <= a.data.len())
        });
        let rows_fit = per_row.is_none_or(|p| {
            p.scales.len() >= rows && p.zero_points.is_none_or(|z| z.len() >= rows)
        });
        let fits = fits && addend_fits && rows_fit;
        fits.then_some(Deferred {
            tile,
            rows,
            out,
            at,
            ld,
            kind,
            int_acc,
            offset,
            scale,
            bias,
            no_offset,
            activation,
            addend,
            per_row,
            stream: stream
                && matches!(kind, Out::F32 | Out::Bf16)
                && crate::c_stores::aligned_rows((out.ptr() as usize).wrapping_add(at), ld),
        })
    }

    /// Rows of the micro-tile.
    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    /// Writes the output rows `from..to` (those of them below [`Deferred::rows`]).
    ///
    /// # Safety
    /// Both buffers are alive; nothing writes the scratch tile's rows or reads or writes the
    /// output rows meanwhile (they are this thread's part of the output).
    #[inline(always)]
    pub(crate) unsafe fn run(&self, from: usize, to: usize) {
        let to = to.min(self.rows);
        if from >= to {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `new` took a `Support`, so the CPU has the features; the caller's contract
        // covers the buffers, and `new` checked that rows `..rows` lie inside them.
        unsafe {
            self.run_avx512(from, to)
        }
    }

    /// [`Deferred::run`], with the activation resolved once per call.
    ///
    /// # Safety
    /// As [`Deferred::run`], with `from < to <= rows`, on a CPU [`Support`] vouches for.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
    unsafe fn run_avx512(&self, from: usize, to: usize) {
        // SAFETY: (each arm) the caller's contract, passed on.
        unsafe {
            match self.activation {
                Activation::Relu => self.rows_with(ReluLanes, from, to),
                Activation::GeluTanh | Activation::GeluErf => {
                    if let Some(gate) = GateLanes::of(self.activation) {
                        self.rows_with(gate, from, to)
                    }
                }
                Activation::Silu => self.rows_with(SiluLanes, from, to),
                _ => self.rows_with(IdentityLanes, from, to),
            }
        }
    }

    /// Steps 1 to 7 of the epilogue on rows `from..to`, each in two registers: the operations
    /// of `dequantize_int` / `dequantize_float`, the activation, `add_residual` and the
    /// conversion of the staged path, in the same order.
    ///
    /// # Safety
    /// As [`Deferred::run_avx512`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
    #[inline]
    unsafe fn rows_with<A: Lanes>(&self, act: A, from: usize, to: usize) {
        use std::arch::x86_64::*;
        // SAFETY: (the loads of this block) each parameter panel is 32 values of 4 bytes,
        // read unaligned in two halves.
        let half = |p: *const f32| unsafe { (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16))) };
        let (scale_lo, scale_hi) = half(self.scale.as_ptr());
        let (bias_lo, bias_hi) = half(self.bias.as_ptr());
        let (off_lo, off_hi) = half(self.offset.as_ptr().cast());
        let (off_lo, off_hi) = (_mm512_castps_si512(off_lo), _mm512_castps_si512(off_hi));
        let (w_lo, w_hi) = match &self.per_row {
            Some(p) => half(p.weights.as_ptr()),
            None => (scale_lo, scale_hi),
        };
        let (sums_lo, sums_hi) = match self.per_row.and_then(|p| p.sums) {
            Some(s) => {
                let (lo, hi) = half(s.as_ptr().cast());
                (_mm512_castps_si512(lo), _mm512_castps_si512(hi))
            }
            None => (off_lo, off_hi),
        };
        for r in from..to {
            // Steps 1 and 3's parameters of this row: the panel's, or made from the row's
            // scale and zero point as `RowParams::panel` makes them (the same products).
            let (off_lo, off_hi, scale_lo, scale_hi, no_offset) = match &self.per_row {
                None => (off_lo, off_hi, scale_lo, scale_hi, self.no_offset),
                Some(p) => {
                    // SAFETY: `new` checked that the slices hold `rows > r` values.
                    let (scale, zero_point) = unsafe {
                        (
                            *p.scales.get_unchecked(r),
                            p.zero_points.map_or(0, |z| *z.get_unchecked(r)),
                        )
                    };
                    let common = _mm512_set1_ps(p.alpha * scale);
                    let zp = _mm512_set1_epi32(zero_point);
                    (
                        _mm512_mullo_epi32(zp, sums_lo),
                        _mm512_mullo_epi32(zp, sums_hi),
                        _mm512_mul_ps(common, w_lo),
                        _mm512_mul_ps(common, w_hi),
                        p.sums.is_none(),
                    )
                }
            };
            // SAFETY: `new` checked that row `r < rows` lies inside the tile: 128 bytes, read
            // unaligned as two halves.
            let (lo, hi) = unsafe {
                let src = self.tile.ptr().add(r * SCRATCH_ROW);
                (
                    _mm512_loadu_si512(src.cast()),
                    _mm512_loadu_si512(src.add(64).cast()),
                )
            };
            // Steps 1 and 2 (or the f32 accumulators' bits), then 3 and 4: `(acc - offset) as
            // f32 * scale + bias`, a rounded product and a rounded sum.
            let (lo, hi) = if !self.int_acc {
                (_mm512_castsi512_ps(lo), _mm512_castsi512_ps(hi))
            } else if no_offset {
                (_mm512_cvtepi32_ps(lo), _mm512_cvtepi32_ps(hi))
            } else {
                (
                    _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, off_lo)),
                    _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, off_hi)),
                )
            };
            let lo = _mm512_add_ps(_mm512_mul_ps(lo, scale_lo), bias_lo);
            let hi = _mm512_add_ps(_mm512_mul_ps(hi, scale_hi), bias_hi);
            // Step 5.
            // SAFETY: the CPU supports AVX-512F and DQ.
            let (lo, hi) = unsafe { (act.apply(lo), act.apply(hi)) };
            // Step 6: `x + beta * r`, a rounded product and a rounded sum, `r` widened exactly
            // (bf16 is the upper half of an f32; a NaN gets its quiet bit, as `bf16::to_f32`
            // sets it, which the product would set anyway).
            let (lo, hi) = match &self.addend {
                None => (lo, hi),
                Some(a) => {
                    // SAFETY: `new` checked that the residual row `r` (32 elements at
                    // `at + r * ld`) lies inside its buffer, read unaligned.
                    let (r_lo, r_hi) = unsafe {
                        let src = a.data.ptr().add(a.at + r * a.ld);
                        if a.bf16 {
                            let h = _mm512_loadu_si512(src.cast());
                            let widen = |half: __m256i| {
                                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                                    half,
                                )))
                            };
                            (
                                widen(_mm512_castsi512_si256(h)),
                                widen(_mm512_extracti64x4_epi64::<1>(h)),
                            )
                        } else {
                            (
                                _mm512_loadu_ps(src.cast()),
                                _mm512_loadu_ps(src.add(64).cast()),
                            )
                        }
                    };
                    let beta = _mm512_set1_ps(a.beta);
                    (
                        _mm512_add_ps(lo, _mm512_mul_ps(beta, r_lo)),
                        _mm512_add_ps(hi, _mm512_mul_ps(beta, r_hi)),
                    )
                }
            };
            // SAFETY: `new` checked that the output row `r` (32 elements of `kind` at
            // `at + r * ld`) lies inside `out`, which the caller keeps alive and unshared.
            let dst = unsafe { self.out.ptr().add(self.at + r * self.ld) };
            // Step 7.
            match self.kind {
                // SAFETY: 128 writable bytes at `dst`, written unaligned, or streamed where `new`
                // found them on a line boundary (the caller fences them).
                Out::F32 => unsafe {
                    if self.stream {
                        _mm512_stream_ps(dst.cast(), lo);
                        _mm512_stream_ps(dst.add(64).cast(), hi);
                    } else {
                        _mm512_storeu_ps(dst.cast(), lo);
                        _mm512_storeu_ps(dst.add(64).cast(), hi);
                    }
                },
                Out::Int {
                    scale,
                    zero_point,
                    signed,
                } => {
                    let q = |x: __m512| requantize16(x, scale, zero_point, signed);
                    let bytes = _mm256_inserti128_si256::<1>(
                        _mm256_castsi128_si256(_mm512_cvtepi32_epi8(q(lo))),
                        _mm512_cvtepi32_epi8(q(hi)),
                    );
                    // SAFETY: 32 writable bytes at `dst`, written unaligned.
                    unsafe { _mm256_storeu_si256(dst.cast(), bytes) };
                }
                // SAFETY: 32 writable 16-bit slots at `dst`, on a line boundary when streamed
                // (`new` checked); the CPU has what `Support` proves (`new` took one).
                Out::Bf16 => unsafe { store_bf16_row(lo, hi, dst.cast(), NR, self.stream) },
            }
        }
    }
}

/// `requantize` on 16 lanes, each result (inside the output type's range) in its 32-bit lane:
/// `x / scale`, NaN to 0, clamped to +-2^22, rounded half to even through `+ 1.5 * 2^23`, plus
/// the zero point, saturated.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
#[inline]
fn requantize16(
    x: std::arch::x86_64::__m512,
    scale: f32,
    zero_point: i32,
    signed: bool,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    const MAGIC: f32 = 12_582_912.0;
    const LIMIT: f32 = 4_194_304.0;
    let v = _mm512_div_ps(x, _mm512_set1_ps(scale));
    let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    let v = _mm512_mask_mov_ps(v, nan, _mm512_setzero_ps());
    let v = _mm512_max_ps(
        _mm512_min_ps(v, _mm512_set1_ps(LIMIT)),
        _mm512_set1_ps(-LIMIT),
    );
    let r = _mm512_sub_epi32(
        _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(MAGIC))),
        _mm512_set1_epi32(MAGIC.to_bits() as i32),
    );
    let (lo, hi) = if signed { (-128, 127) } else { (0, 255) };
    let r = _mm512_add_epi32(r, _mm512_set1_epi32(zero_point));
    _mm512_min_epi32(
        _mm512_max_epi32(r, _mm512_set1_epi32(lo)),
        _mm512_set1_epi32(hi),
    )
}

impl Out {
    /// Bytes per element.
    pub(crate) fn size(self) -> usize {
        match self {
            Out::F32 => 4,
            Out::Bf16 => 2,
            Out::Int { .. } => 1,
        }
    }
}

/// Proof that this CPU has what the one-pass rows and [`store_bf16_row`] use: AVX-512 F, BW,
/// DQ and BF16. Made only by [`Support::detect`], once per call of the GEMM; elsewhere the
/// epilogue runs stage by stage.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Support(());

impl Support {
    /// `Some` where the CPU has the features (the standard library caches the tests) and the
    /// emulator's floating-point kernels are not capped below AVX-512
    /// (`AMX_EMULATOR_KERNELS`, which makes an AVX-512 CPU run what an AVX2-only CPU runs).
    pub(crate) fn detect() -> Option<Support> {
        #[cfg(target_arch = "x86_64")]
        {
            let has = amx_runtime::Emulator::float_kernels() == amx_runtime::KernelPath::Avx512
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bf16")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512dq");
            has.then_some(Support(()))
        }
        #[cfg(not(target_arch = "x86_64"))]
        None
    }
}

/// Step 7 for bf16 output: the first `len` (at most 32) of the values in `lo` and `hi` to
/// `dst`, with one VCVTNE2PS2BF16 instead of the rounding written out per lane.
///
/// The instruction rounds to nearest even and keeps a NaN's sign and upper bits with the quiet
/// bit set, as `to_bf16_bits` does, but reads a denormal input as zero: a row holding one is
/// converted by `to_bf16_bits` instead, so every CPU writes the same bits.
///
/// With `stream` and `len` 32, the row (one 64-byte line) is written with a streaming store.
///
/// # Safety
/// The CPU has what [`Support`] proves; `dst` is `len` writable 16-bit slots, 64-byte aligned
/// when `stream` (the caller then fences the store before it returns).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512bf16")]
#[inline]
pub(crate) unsafe fn store_bf16_row(
    lo: std::arch::x86_64::__m512,
    hi: std::arch::x86_64::__m512,
    dst: *mut u16,
    len: usize,
    stream: bool,
) {
    use std::arch::x86_64::*;
    /// `_mm512_fpclass_ps_mask`'s class bit for denormals.
    const DENORMAL: i32 = 0x20;
    let len = len.min(NR);
    let denormals = _mm512_fpclass_ps_mask::<DENORMAL>(lo) | _mm512_fpclass_ps_mask::<DENORMAL>(hi);
    if denormals != 0 {
        let mut x = [0f32; NR];
        // SAFETY: `x` is 32 writable f32.
        unsafe {
            _mm512_storeu_ps(x.as_mut_ptr(), lo);
            _mm512_storeu_ps(x.as_mut_ptr().add(16), hi);
        }
        for (j, &v) in x.iter().enumerate().take(len) {
            // SAFETY: slot `j < len` of `dst` (the caller's contract).
            unsafe { dst.add(j).write_unaligned(crate::epilogue::to_bf16_bits(v)) };
        }
        return;
    }
    // SAFETY: both are 512 bits of plain vector data; every bit pattern is valid.
    let bits = unsafe { std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo)) };
    let keep = if len == NR {
        u32::MAX
    } else {
        (1u32 << len) - 1
    };
    if stream && len == NR {
        // SAFETY: 64 writable bytes at `dst`, 64-byte aligned (the caller's contract).
        unsafe { _mm512_stream_si512(dst.cast(), bits) };
        return;
    }
    // SAFETY: the masked store writes the first `len` 16-bit lanes, all inside `dst`.
    unsafe { _mm512_mask_storeu_epi16(dst.cast(), keep, bits) };
}
