//! Plain reference products, and the checks that compare this crate's results with them.
//!
//! # int8
//!
//! The tiles accumulate in 32-bit two's complement with wraparound
//! ([semantics.md section 9](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#9-integer-dot-products-tdpbssd-tdpbsud-tdpbusd-tdpbuud)),
//! so
//! the order of the sum does not matter: the reference sums exactly in `i64` and wraps to
//! `i32` once, and the check is **exact equality**.
//!
//! # bf16: what the reference computes
//!
//! The tiles read a denormal bf16 input, and a denormal starting C, as a zero of the same sign
//! (DAZ,
//! [semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula));
//! the reference reads them the same way. It then sums in
//! `f64`: C's start `c0` (0 when overwriting), then `a_k b_k` for `k = 0, 1, ..., K - 1`. A
//! product of two bf16 is exact in `f64` (8-bit significands, exponents far inside `f64`'s
//! range). With `K = 0` no dot product runs, so C keeps its start as it is, denormal or not,
//! and so does the reference. [`gemm`] rounds the `f64` sum to `f32` once; [`verify`] compares
//! the output with the `f64` sum.
//!
//! # bf16: the error bound
//!
//! Notation: `p_k = a_k b_k` (after DAZ), `S = c0 + sum_k p_k`, `M = |c0| + sum_k |p_k|`,
//! `T = ceil(K / 32)` tile dot products per output, `h = T + 16`, `u = 2^-24`,
//! `gamma(n) = n u / (1 - n u)`. Every finite output `c` of the tiles satisfies
//!
//! ```text
//! |c - S| <= gamma(h) M + (1 + gamma(h)) F 2^-126,    F = 34 T + 1  (F = 0 when K = 0)
//! ```
//!
//! **What the tiles compute**
//! ([semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula)).
//! Dot product `t = 1 .. T` takes
//! elements `32 (t - 1) .. 32 t - 1` of K (the tail of K padded with zeros). Its two `f32`
//! lanes (even and odd k) start at `+0` and take 16 fused multiply-add steps each,
//! `acc := fl(p + acc)`; then `s_t = fl(te + to)` and `C_t = fl(C_(t-1) + s_t)`, where `C_0` is
//! `c0` after DAZ; the output is `C_T`. Storing and reloading C between blocks of K is exact,
//! and every intermediate value is a result of `fl`, which never returns a denormal, so DAZ
//! acts on the inputs and on `c0` only. Each `fl` rounds the exact value `x` once to 24
//! significant bits (to nearest even, exponent unbounded) and returns zero when that is below
//! `2^-126` in magnitude. So, unless it overflows, every operation satisfies
//!
//! ```text
//! fl(x) = x (1 + d) + e,    |d| <= u,  |e| < 2^-126,  and d = 0 whenever e != 0
//! ```
//!
//! Not flushed: `e = 0`, and the result is `x` rounded to 24 bits, within `u |x|` of it.
//! Flushed: the result is 0, so `d = 0` and `e = -x`; and `|x| < 2^-126`, because rounding is
//! monotonic and `2^-126` rounds to itself.
//!
//! **Unrolling** the operations of one output gives, exactly,
//!
//! ```text
//! C_T = c0 (1 + θ_0) + sum_k p_k (1 + θ_k) + sum_f e_f (1 + θ_f)
//! ```
//!
//! where `f` runs over the operations that flushed (and the DAZ of a denormal `c0`), and each
//! `1 + θ` is the product of the factors `1 + d` of the operations its term passes through
//! after it enters. Counting those operations:
//!
//! - a product entering step `j` (1 to 16) of a lane in dot product `t` passes through steps
//!   `j .. 16` of the lane, `te + to`, `C_t`, and `C_(t+1) .. C_T`: `(17 - j) + 2 + (T - t)`
//!   operations. Step 1 adds the product to `+0`, and a product of two bf16 has at most 16
//!   significant bits, so step 1 is exact unless it flushes: `d = 0` there. At most
//!   `15 + 2 + (T - 1) = T + 16 = h` factors count;
//! - `c0` passes through `C_1 .. C_T`: `T <= h` factors;
//! - a flush error enters after its own operation (whose `d` is 0) and meets at most the same
//!   later operations as a product: at most `h` factors.
//!
//! As `(1 + u)^n - 1 <= gamma(n)` for `n u < 1`, every `|θ| <= gamma(h)`. Flush points per
//! output: the 32 lane steps, `te + to` and `C_t` of each dot product (`34 T`), plus one for
//! the DAZ of a denormal `c0`, which changes it by less than `2^-126` (the reference applies
//! the same DAZ, so for [`verify`] that one is spare). Each `|e_f| < 2^-126`. Hence
//! `|C_T - S| <= gamma(h) M + F 2^-126 (1 + gamma(h))`, the bound above.
//!
//! The relative part grows with `h = ceil(K / 32) + 16`, not with K, because each term meets at
//! most 15 lane roundings and then one rounding per later dot product: for K = 4096 it is
//! about `144 * 2^-24`, i.e. `8.6e-6` of `M`. The absolute part cannot be dropped: with
//! `a_k = 2^-63`, `b_k = 2^-64` every product is `2^-127`, every lane step flushes, and the
//! tiles return 0 for the exact `K * 2^-127`, which the `34 T * 2^-126` (at least
//! `K * 2^-126 * 34 / 32`) covers for every K.
//!
//! **The reference's own error.** The `f64` sum `Ŝ` and the computed magnitude `M̂` are
//! recursive sums of `K + 1` terms, all exact multiples of `2^-266` (no underflow), so with
//! `u' = 2^-53` and `gamma'(K) = K u' / (1 - K u')`, `|Ŝ - S| <= gamma'(K) M` and
//! `M <= M̂ / (1 - gamma'(K))` (N. J. Higham, *Accuracy and Stability of Numerical
//! Algorithms*, 2nd ed., section 4.2). So [`verify`] accepts a finite output when
//!
//! ```text
//! |c - Ŝ| <= ((gamma(h) + gamma'(K)) M̂ / (1 - gamma'(K)) + (1 + gamma(h)) F 2^-126) (1 + 2^-40)
//! ```
//!
//! which is [`bf16_tolerance`]`(K, M̂)`. The factor `1 + 2^-40` covers the dozen `f64` roundings
//! (each at most `2^-53` relative, on positive terms) of evaluating it and `|c - Ŝ|`. For K of
//! about `2^29` or more `h u` reaches 1, and the tolerance is infinite (no bound is claimed). The reference's
//! own `f32` output is `Ŝ` rounded once, within `u |Ŝ|` or `2^-150` of it, which the bound covers.
//!
//! # fp16
//!
//! TDPFP16PS reads fp16 denormal inputs as values; they are normal `f32`s, never below
//! `2^-24`, so the reference's DAZ leaves them alone, and the bound above holds as derived.
//!
//! # FP8: the error bound
//!
//! The FP8 products (TDPBF8PS, TDPHF8PS, TDPBHF8PS, TDPHBF8PS) read every FP8 value exactly,
//! denormals included, and C under DAZ
//! ([semantics.md section 16](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#16-amx-fp8-tdpbf8ps-tdpbhf8ps-tdphbf8ps-tdphf8ps));
//! the reference reads them the same way and sums in `f64` as for bf16. A product of two FP8
//! values has at most 8 significant bits and lies between `2^-32` and `2^32` in magnitude, so it
//! is exact in `f32` and in `f64`. With `T = ceil(K / 64)` tile dot products per output and
//! `h = T + 17`, every finite output satisfies
//!
//! ```text
//! |c - S| <= gamma(h) M + (1 + gamma(h)) F 2^-126,    F = 1  (F = 0 when K = 0)
//! ```
//!
//! **What the tiles compute.** Dot product `t` takes elements `64 (t - 1) .. 64 t - 1` of K (the
//! tail padded with zeros), 16 dwords of four. For dword `j` (1 to 16) the four exact products
//! are added in pairs, `q = fl(p0 + p1)` into the even lane and `q' = fl(p2 + p3)` into the odd
//! lane, each lane `acc := fl(acc + q)` from `+0`; then `s_t = fl(te + to)` and
//! `C_t = fl(C_(t-1) + s_t)`, with the `fl` of the bf16 derivation.
//!
//! **Counting factors.** A product entering dword `j` of dot product `t` passes through its pair
//! sum, lane steps `j .. 16`, `te + to`, `C_t` and `C_(t+1) .. C_T`. Lane step 1 adds a pair
//! sum (a result of `fl`, so zero or normal) to `+0` and is exact: at most
//! `1 + 15 + 2 + (T - 1) = T + 17 = h` factors count; `c0` meets `T`.
//!
//! **No operation flushes.** Every product is a multiple of `2^-32` (the least FP8 magnitudes
//! are `2^-16` and `2^-9`). Rounding a multiple of `2^-32` to 24 significant bits gives a
//! multiple of `2^-32` (below `2^-8` nothing is rounded off; above, the result's last place
//! is coarser), so every pair sum, lane value and `s_t` is 0 or a multiple of `2^-32`, and a
//! nonzero one is at least `2^-32`: none of them is flushed. For `x = C_(t-1) + s_t`: with
//! `s_t = 0` or `C_(t-1) = 0`, `x` is zero or at least `2^-126` already (`C_(t-1)` is a
//! result of `fl` or `c0` after DAZ); otherwise either `|C_(t-1)| < 2^-33`, so
//! `|x| > 2^-33`, or `C_(t-1)` is a multiple of `2^-56` (an `f32` of at least `2^-33`), so
//! `x` is a nonzero multiple of `2^-56` or 0. So the only flush is the DAZ of a denormal
//! `c0`: `F = 1`, which the reference applies too.
//!
//! The reference's own error is that of the bf16 case (`K + 1` exact `f64` terms), and
//! [`verify`] accepts a finite output within
//!
//! ```text
//! ((gamma(h) + gamma'(K)) M̂ / (1 - gamma'(K)) + (1 + gamma(h)) F 2^-126) (1 + 2^-40)
//! ```
//!
//! which is [`float_tolerance`]`(kind, K, M̂)` for an FP8 `kind`. Infinities and NaN (bf8 has
//! infinities, hf8 only NaN) are compared by class under the rules below, with this `h`.
//!
//! # bf16: infinities and NaN
//!
//! An operation overflows only when its exact value reaches `Ω = 2^128 - 2^103`, the least
//! magnitude that rounds to infinity. Unrolling as above with `|fl(x)| <= (1 + u) |x|` (a
//! flushed result is 0) bounds every exact intermediate value by `(1 + gamma(h)) M_f`, where
//! `M_f` is `|c0| + sum |p_k|` over the finite terms only. So an intermediate sum **may
//! overflow** only when `(1 + gamma(h)) M_f >= Ω` (evaluated from the computed `M̂_f` with the
//! same allowances as the tolerance). [`verify`] compares each bf16 output by class:
//!
//! 1. The reference is NaN (a NaN input or start; infinity times zero, including infinity
//!    times a denormal, which reads as zero; or infinite terms of both signs): the output must
//!    be NaN. In the tiles a NaN operand gives NaN, and so do `inf * 0` and `inf + (-inf)`, in
//!    a lane, in `te + to` or in `C + (te + to)`.
//! 2. The reference is `+inf` or `-inf`: the output must be that infinity, or NaN when an
//!    intermediate sum may overflow (the lane holding the infinite term meets a lane or a C
//!    that overflowed to the other infinity). It is never the other infinity: the lane
//!    holding the infinite term keeps it or turns NaN, and so do `te + to` and every later C.
//! 3. The reference is finite: a finite output must lie within the bound. A non-finite output
//!    is right only when an intermediate sum may overflow: then a lane can overflow to `+inf`
//!    and the other to `-inf` (NaN), or C to an infinity that later finite terms cannot bring
//!    back, whatever the sign of the exact sum. An exact sum beyond `f32`'s range is the
//!    infinity it rounds to in the output type (`1e76` from two large bf16 products is
//!    `+inf`, as the tiles give); this is the case where `M_f >= |S| >= Ω`.
//!
//! With no possible overflow, rules 1 to 3 leave one class (NaN, one infinity, or finite within
//! the bound) for each output, as IEEE arithmetic in `f64` and in the tiles agree on it.
//!
//! # Linear layers (fused epilogues)
//!
//! Two references check [`Gemm::run_with`](crate::Gemm::run_with):
//!
//! - [`linear_model`] performs the [epilogue's steps](crate::epilogue) one by one, in `f32`,
//!   on a given accumulator (the exact integer product for int8, computed by [`gemm`]; the
//!   plain GEMM's `f32` output for bf16): the fused path must match it **bit for bit**.
//! - [`verify_linear`] computes each output in `f64` from the inputs (exact integer product or
//!   `f64` sum, exact scales, `f64` activations) and accepts the output when it lies within
//!   [`linear_tolerance`], which adds up the `f32` steps' errors: with `u = 2^-24`,
//!   `P = s q` (exact scale times exact accumulator), `b` the bias, `L` the activation's
//!   slope bound ([`Activation::lipschitz`](crate::Activation::lipschitz)), and `E_acc` the
//!   bf16 accumulator's bound ([`bf16_tolerance`]; 0 for int8, whose accumulator is exact):
//!
//!   ```text
//!   E_pre = 6u (|P| + |b|) + 1.01 |s| E_acc + 3 * 2^-126      (steps 2-4: 5 roundings)
//!   E_act = L E_pre + 2^-20 (1 + |X| + E_pre)                 (step 5, X = P + b)
//!   E     = E_act + 3u (|act(X)| + E_act + |beta R|)           (step 6: 2 roundings, and f32 out)
//!   bf16 output: E + 2^-8 (|Y| + E);   u8 / i8: q within rne((Y +- E) / scale) + zp, saturated
//!   ```

use std::borrow::Cow;
use std::fmt;

use crate::epilogue::{self, Activation, Epilogue, Output, Residual, WeightScale};
use crate::error::{check_sizes, check_slice, EpilogueError, GemmError, Operand};
use crate::gemm::{check_product, Mode};
use crate::matrix::{BLayout, BRef, MatMut, MatRef};
use crate::precision::{Precision, PrecisionKind, Scalar};

/// `C (+)= A x B` computed plainly (int8: exact, wrapped to `i32`; bf16: denormal inputs and a
/// denormal start read as zero as the tiles read them, summed in `f64` and rounded to `f32`
/// once; fp16 and FP8 the same way, their denormal inputs being values the tiles keep; see
/// the [module docs](self)). Same argument conventions, checks and errors as
/// [`Gemm::run_unpacked`](crate::Gemm::run_unpacked); leaves C unchanged when it returns an
/// error.
#[allow(clippy::too_many_arguments)]
pub fn gemm<P: Precision>(
    m: usize,
    n: usize,
    k: usize,
    a: &[P::A],
    lda: usize,
    b: &[P::B],
    ldb: usize,
    c: &mut [P::C],
    ldc: usize,
    mode: Mode,
) -> Result<(), GemmError> {
    check_slice(Operand::A, m, k, lda, a.len())?;
    check_slice(Operand::B, k, n, ldb, b.len())?;
    check_slice(Operand::C, m, n, ldc, c.len())?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: C = 0, or C unchanged. (A and B may be empty slices whatever their
        // leading dimensions are, so they are not indexed.)
        if mode == Mode::Overwrite {
            for i in 0..m {
                c[i * ldc..i * ldc + n].fill(P::C::default());
            }
        }
        return Ok(());
    }
    let b = Widened::new::<P>(k, n, b, ldb);
    for i in 0..m {
        let row = &mut c[i * ldc..i * ldc + n];
        let start = (mode == Mode::Accumulate).then_some(&*row);
        let e = b.row::<P>(&a[i * lda..i * lda + k], start);
        for (out, e) in row.iter_mut().zip(&e) {
            *out = P::C::from_f64(e.exact);
        }
    }
    Ok(())
}

/// The smallest normal `f32` and bf16, `2^-126`.
const MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64;

/// `f32`'s overflow threshold `Ω = 2^128 - 2^103`: the least magnitude that rounds to infinity.
const OVERFLOW: f64 = 2.0 * (1u128 << 127) as f64 - (1u128 << 103) as f64;

/// The allowance for the `f64` roundings of evaluating a bound and comparing with it.
const EVALUATION: f64 = 1.0 + 1.0 / (1u64 << 40) as f64;

/// An element as the tiles read it: a denormal is a zero of its sign (DAZ). A no-op for the
/// integer types, whose nonzero values are at least 1 in magnitude.
fn daz(x: f64) -> f64 {
    if x != 0.0 && x.abs() < MIN_NORMAL {
        0f64.copysign(x)
    } else {
        x
    }
}

/// B converted once to `f64` (exact for every element type) as the tiles read it, row-major
/// `k x n`.
struct Widened {
    n: usize,
    values: Vec<f64>,
}

/// One output of the reference.
#[derive(Clone, Copy)]
struct Expected {
    /// The exact (int8, already wrapped to i32) or f64 (bf16) result.
    exact: f64,
    /// `|c0| + sum |a_k||b_k|`.
    magnitude: f64,
    /// The same over the finite terms only: what an intermediate sum can grow to.
    finite: f64,
}

impl Expected {
    /// Before the products: `c0` as the tiles read it (DAZ when there is a product: with
    /// K = 0 the tiles never read C), or zero.
    fn start<P: Precision>(c0: Option<&P::C>, k: usize) -> Expected {
        let c = c0.map_or(0.0, |x| match k {
            0 => x.to_f64(),
            _ => daz(x.to_f64()),
        });
        let magnitude = c.abs();
        Expected {
            exact: c,
            magnitude,
            finite: if magnitude.is_finite() {
                magnitude
            } else {
                0.0
            },
        }
    }

    /// Adds the next product, `a_k * b_k` with both as the tiles read them (DAZ).
    #[inline(always)]
    fn add(&mut self, p: f64) {
        self.exact += p;
        self.magnitude += p.abs();
        if p.is_finite() {
            self.finite += p.abs();
        }
    }

    /// After the last product: integer results wrap to i32 as the tiles wrap them. The `f64`
    /// sums are exact for the integer types (each product below 2^16, so any K below 2^37
    /// stays below 2^53).
    fn finish<P: Precision>(mut self) -> Expected {
        if P::KIND.is_integer() {
            self.exact = f64::from(self.exact as i64 as i32);
        }
        self
    }
}

impl Widened {
    fn new<P: Precision>(k: usize, n: usize, b: &[P::B], ldb: usize) -> Widened {
        let mut values = Vec::with_capacity(k * n);
        for kk in 0..k {
            values.extend(b[kk * ldb..kk * ldb + n].iter().map(|x| daz(x.to_f64())));
        }
        Widened { n, values }
    }

    /// Row `a_row x B`, plus `c0` when given, as the tiles read them (see [`Expected`]).
    fn row<P: Precision>(&self, a_row: &[P::A], c0: Option<&[P::C]>) -> Vec<Expected> {
        let k = a_row.len();
        let mut row: Vec<Expected> = match c0 {
            Some(c0) => c0
                .iter()
                .map(|x| Expected::start::<P>(Some(x), k))
                .collect(),
            None => vec![Expected::start::<P>(None, k); self.n],
        };
        for (kk, a) in a_row.iter().enumerate() {
            let a = daz(a.to_f64());
            let b_row = &self.values[kk * self.n..(kk + 1) * self.n];
            for (e, b) in row.iter_mut().zip(b_row) {
                e.add(a * b);
            }
        }
        row.into_iter().map(Expected::finish::<P>).collect()
    }

    /// Output `j` of [`Widened::row`] alone, the same sums in the same order: what a sampled
    /// check needs, without the rest of the row (at 2048^3, a row per sampled output was most
    /// of a benchmark's run).
    fn at<P: Precision>(&self, a_row: &[P::A], c0: Option<&P::C>, j: usize) -> Expected {
        let mut e = Expected::start::<P>(c0, a_row.len());
        // With K = 0 there are no values (and no products).
        let column = self.values.get(j..).unwrap_or_default();
        for (a, b) in a_row.iter().zip(column.iter().step_by(self.n.max(1))) {
            e.add(daz(a.to_f64()) * b);
        }
        e.finish::<P>()
    }
}

/// `gamma(n) = n u / (1 - n u)`, the bound on `|prod (1 + d_i) - 1|` over `n` factors with
/// `|d_i| <= u`; infinite when `n u >= 1` (no bound).
fn gamma(n: f64, u: f64) -> f64 {
    if n * u < 1.0 {
        n * u / (1.0 - n * u)
    } else {
        f64::INFINITY
    }
}

/// The counts of the [module docs](self)' bounds for a float precision over `k` products:
/// `h`, the most roundings a term meets (bf16, fp16: `ceil(k / 32) + 16`; FP8:
/// `ceil(k / 64) + 17`), and `F`, the operations that may flush (bf16, fp16:
/// `34 ceil(k / 32) + 1`; FP8: 1; 0 when `k` is 0).
fn counts(kind: PrecisionKind, k: usize) -> (f64, f64) {
    let t = k.div_ceil(kind.k_per_step()) as f64;
    let (h, flushes) = if kind.is_fp8() {
        (t + 17.0, 1.0)
    } else {
        (t + 16.0, 34.0 * t + 1.0)
    };
    (h, if k == 0 { 0.0 } else { flushes })
}

/// `gamma(h)` of the tiles (`h` from [`counts`], `u = 2^-24`) and `gamma'(k)` of the `f64`
/// reference (`u' = 2^-53`).
fn gammas(kind: PrecisionKind, k: usize) -> (f64, f64) {
    let (h, _) = counts(kind, k);
    (gamma(h, 2f64.powi(-24)), gamma(k as f64, 2f64.powi(-53)))
}

/// The largest error a finite bf16 output of this crate may have, measured from the `f64`
/// reference (see the [module docs](self), which prove it): for a sum over `k` products with
/// `|c0| + sum |a_k||b_k| = magnitude` (computed in `f64` from the inputs as the tiles read
/// them). Infinite when `k` is too large for the bound (about `2^29` or more).
///
/// Compare with an `f64` reference (this module's): a plain `f32` loop has an error of its
/// own, up to about `k * 2^-24 * magnitude`, which for large `k` exceeds this bound, so a
/// correct output may look wrong against it.
pub fn bf16_tolerance(k: usize, magnitude: f64) -> f64 {
    float_tolerance(PrecisionKind::Bf16, k, magnitude)
}

/// The largest error a finite output of the float precision `kind` may have, measured from the
/// `f64` reference: [`bf16_tolerance`] for bf16 and fp16, the FP8 bound of the
/// [module docs](self) for the FP8 products, 0 for the integer precisions (exact). Infinite when
/// `k` is too large for the bound (about `2^29` or more).
pub fn float_tolerance(kind: PrecisionKind, k: usize, magnitude: f64) -> f64 {
    if kind.is_integer() {
        return 0.0;
    }
    let (g, g_ref) = gammas(kind, k);
    if g_ref >= 0.5 || g.is_infinite() {
        return f64::INFINITY;
    }
    // The operations that may flush, and the DAZ of a denormal start.
    let (_, flushes) = counts(kind, k);
    let relative = (g + g_ref) * magnitude / (1.0 - g_ref);
    let absolute = (1.0 + g) * flushes * MIN_NORMAL;
    (relative + absolute) * EVALUATION
}

/// Whether an intermediate sum of a float output over `k` products may overflow, when the
/// finite terms' magnitudes sum to `finite`: `(1 + gamma(h)) M_f >= Ω` (module docs).
fn may_overflow(kind: PrecisionKind, k: usize, finite: f64) -> bool {
    let (g, g_ref) = gammas(kind, k);
    g_ref >= 0.5 || (1.0 + g) * finite / (1.0 - g_ref) * EVALUATION >= OVERFLOW
}

/// Whether `got` is a right bf16 output where the `f64` reference is `expected`, with the
/// rules of the [module docs](self): NaN for NaN; the same infinity for an infinity (or NaN if
/// an intermediate sum may overflow); for a finite reference, a finite output within
/// `tolerance`, or a non-finite one where an intermediate sum may overflow.
fn bf16_matches(got: f64, expected: f64, tolerance: f64, overflow: bool) -> bool {
    if expected.is_nan() {
        got.is_nan()
    } else if expected.is_infinite() {
        got == expected || (got.is_nan() && overflow)
    } else if !got.is_finite() {
        // The exact sum as the output type holds it: beyond f32's range, the infinity the
        // tiles give without any intermediate overflow.
        got == f64::from(expected as f32) || overflow
    } else {
        (got - expected).abs() <= tolerance
    }
}

/// Which outputs [`verify`] compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// Every output.
    All,
    /// About this many outputs: the four corners, the last row and column, and random others
    /// (seeded, so reruns check the same ones).
    Sampled(usize),
}

/// Why [`verify`] did not pass: bad arguments, or a result that does not match.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum VerifyError {
    /// The arguments do not describe matrices the slices hold (the checks of [`gemm`], and C's
    /// starting values `c0` checked as C).
    Input(GemmError),
    /// An output differs from the reference by more than allowed.
    Mismatch(Mismatch),
    /// An output of a fused linear layer lies outside its bound ([`verify_linear`]).
    LinearMismatch(LinearMismatch),
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyError::Input(e) => write!(f, "cannot verify: {e}"),
            VerifyError::Mismatch(m) => m.fmt(f),
            VerifyError::LinearMismatch(m) => m.fmt(f),
        }
    }
}

// Display prints the wrapped error's message, so `source` continues below it (each message
// once in a printed chain).
impl std::error::Error for VerifyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VerifyError::Input(e) => e.source(),
            VerifyError::Mismatch(m) => m.source(),
            VerifyError::LinearMismatch(m) => m.source(),
        }
    }
}

impl From<GemmError> for VerifyError {
    fn from(e: GemmError) -> Self {
        VerifyError::Input(e)
    }
}

impl From<Mismatch> for VerifyError {
    fn from(m: Mismatch) -> Self {
        VerifyError::Mismatch(m)
    }
}

/// A result that does not match the reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Row of C.
    pub row: usize,
    /// Column of C.
    pub col: usize,
    /// The value computed.
    pub got: f64,
    /// The reference value.
    pub expected: f64,
    /// The allowed error (0 for int8).
    pub tolerance: f64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "C[{}][{}] = {} but the reference is {} (allowed error {:e})",
            self.row, self.col, self.got, self.expected, self.tolerance
        )
    }
}

impl std::error::Error for Mismatch {}

/// What [`verify`] compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verified {
    /// Outputs compared.
    pub checked: usize,
    /// Outputs in C.
    pub total: usize,
    /// The largest `|error| / tolerance` seen (0 for int8, where the check is exact).
    pub worst_ratio: f64,
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} outputs", self.checked, self.total)?;
        if self.worst_ratio > 0.0 {
            write!(f, ", worst |err|/bound {:.3}", self.worst_ratio)?;
        }
        Ok(())
    }
}

/// One SplitMix64 step, to spread the sampled outputs over C: written here because a published
/// crate cannot depend on the workspace's unpublished test-support crate, which has the RNG.
fn mix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Compares `c` (the result of `C (+)= A x B` from `c0`, or from nothing with
/// [`Mode::Overwrite`]) with the reference: exact for int8; for the float precisions (bf16,
/// fp16, FP8), by class (NaN, infinity, finite) and finite outputs within
/// [`float_tolerance`], as the [module docs](self) derive.
///
/// The arguments are checked as [`gemm`] checks them (`c0`, when given, with C's shape and
/// `ldc`); bad ones give [`VerifyError::Input`], a difference [`VerifyError::Mismatch`].
#[allow(clippy::too_many_arguments)]
pub fn verify<P: Precision>(
    m: usize,
    n: usize,
    k: usize,
    a: &[P::A],
    lda: usize,
    b: &[P::B],
    ldb: usize,
    c0: Option<&[P::C]>,
    c: &[P::C],
    ldc: usize,
    outputs: Outputs,
) -> Result<Verified, VerifyError> {
    check_slice(Operand::A, m, k, lda, a.len())?;
    check_slice(Operand::B, k, n, ldb, b.len())?;
    check_slice(Operand::C, m, n, ldc, c.len())?;
    if let Some(c0) = c0 {
        check_slice(Operand::C, m, n, ldc, c0.len())?;
    }
    let mut verified = Verified {
        checked: 0,
        // C holds `(m - 1) * ldc + n >= m * n` elements when neither is 0 (checked above).
        total: m * n,
        worst_ratio: 0.0,
    };
    if m == 0 || n == 0 {
        return Ok(verified);
    }
    let b = Widened::new::<P>(k, n, b, ldb);
    let mut rows: Vec<usize> = (0..m).collect();
    let mut picked: Option<Vec<Vec<usize>>> = None;
    if let Outputs::Sampled(count) = outputs {
        if count < m * n {
            // The corners, the last row and column (sparsely), and random outputs.
            let mut cols = vec![Vec::new(); m];
            for (i, j) in [(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)] {
                cols[i].push(j);
            }
            cols[m - 1].extend((0..n).step_by(n.div_ceil(64)));
            for i in (0..m).step_by(m.div_ceil(64)) {
                cols[i].push(n - 1);
            }
            let mut seed = 0x9E37_79B9_7F4A_7C15u64;
            for _ in 0..count {
                seed = mix(seed);
                cols[(seed >> 32) as usize % m].push((seed & 0xFFFF_FFFF) as usize % n);
            }
            // Each output once: the corners coincide on small shapes, random picks repeat.
            for row in &mut cols {
                row.sort_unstable();
                row.dedup();
            }
            rows.retain(|&i| !cols[i].is_empty());
            picked = Some(cols);
        }
    }
    for i in rows {
        let start = c0.map(|c0| &c0[i * ldc..i * ldc + n]);
        // With k = 0 the row of A is empty (and `a` may be empty whatever `lda` is).
        let a_row = if k == 0 {
            &[][..]
        } else {
            &a[i * lda..i * lda + k]
        };
        let all: Vec<usize>;
        let cols = match &picked {
            Some(cols) => &cols[i],
            None => {
                all = (0..n).collect();
                &all
            }
        };
        // A few outputs of a row one by one, more as the whole row.
        let whole = (cols.len() * 8 >= n).then(|| b.row::<P>(a_row, start));
        for &j in cols {
            let got = c[i * ldc + j].to_f64();
            let e = match &whole {
                Some(row) => row[j],
                None => b.at::<P>(a_row, start.map(|s| &s[j]), j),
            };
            let expected = e.exact;
            verified.checked += 1;
            let (tolerance, matches) = if P::KIND.is_integer() {
                (0.0, got == expected)
            } else {
                let tolerance = float_tolerance(P::KIND, k, e.magnitude);
                let overflow = may_overflow(P::KIND, k, e.finite);
                (tolerance, bf16_matches(got, expected, tolerance, overflow))
            };
            if !matches {
                return Err(VerifyError::Mismatch(Mismatch {
                    row: i,
                    col: j,
                    got,
                    expected,
                    tolerance,
                }));
            }
            let err = (got - expected).abs();
            // Only finite comparisons measure an error (NaN and infinities match by class).
            if tolerance > 0.0 && err.is_finite() {
                verified.worst_ratio = verified.worst_ratio.max(err / tolerance);
            }
        }
    }
    Ok(verified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::{Bf16, Int8};
    use half::bf16;

    #[test]
    fn int8_reference_wraps() {
        // 200 000 products of 16384 sum to 3 276 800 000, past i32::MAX: the silicon's
        // accumulator wraps to that minus 2^32.
        let k = 200_000;
        let a = vec![-128i8; k];
        let b = vec![-128i8; k];
        let mut c = vec![0i32; 1];
        gemm::<Int8>(1, 1, k, &a, k, &b, 1, &mut c, 1, Mode::Overwrite).unwrap();
        assert_eq!(c[0], -1_018_167_296);
        assert!(verify::<Int8>(1, 1, k, &a, k, &b, 1, None, &c, 1, Outputs::All).is_ok());
        c[0] += 1;
        assert!(verify::<Int8>(1, 1, k, &a, k, &b, 1, None, &c, 1, Outputs::All).is_err());
    }

    /// One output computed alone (the sampled check's path) has the very bits of the same
    /// output in its row, for bf16 with specials and denormals and for wrapping int8, with and
    /// without C.
    #[test]
    fn an_output_alone_equals_its_row() {
        // A NaN's sign and payload depend on how the compiler orders an operation's operands,
        // which the optimization level changes: NaNs compare by class, as `verify` compares
        // them, and everything else bit for bit.
        fn same(x: Expected, y: Expected) -> bool {
            let bits = |v: f64| if v.is_nan() { None } else { Some(v.to_bits()) };
            let all = |e: Expected| (bits(e.exact), bits(e.magnitude), bits(e.finite));
            all(x) == all(y)
        }
        let (k, n) = (37, 11);
        let mut seed = 7u64;
        let mut next = move || {
            seed = mix(seed);
            seed
        };
        let special = [
            0x0001u16, 0x8001, 0x7F80, 0xFF80, 0x7FC0, 0x0000, 0x8000, 0x7F7F,
        ];
        let mut bf = |_| {
            let r = next();
            match r % 8 {
                0 => bf16::from_bits(special[(r >> 8) as usize % special.len()]),
                _ => bf16::from_bits((r >> 16) as u16),
            }
        };
        let a: Vec<bf16> = (0..k).map(&mut bf).collect();
        let b: Vec<bf16> = (0..k * n).map(&mut bf).collect();
        let c0: Vec<f32> = (0..n)
            .map(|j| [1.5e-39, -0.0, 3.0, f32::NAN][j % 4])
            .collect();
        let w = Widened::new::<Bf16>(k, n, &b, n);
        for c0 in [None, Some(&c0[..])] {
            let row = w.row::<Bf16>(&a, c0);
            for (j, &e) in row.iter().enumerate() {
                assert!(same(w.at::<Bf16>(&a, c0.map(|c| &c[j]), j), e), "bf16 {j}");
            }
        }
        // Denormal A against infinity (DAZ makes it 0 x inf = NaN) and against 1.0 alone (a
        // product that no larger term absorbs), and a denormal C with a product (DAZ'd).
        let a = [bf16::from_bits(0x0001), bf16::from_bits(0x8001)];
        let b = [0x7F80, 0x3F80, 0x0000, 0x0000, 0x0000, 0x3F80].map(bf16::from_bits);
        let c0 = [0.0f32, 0.0, 1.0e-40];
        let w = Widened::new::<Bf16>(2, 3, &b, 3);
        let row = w.row::<Bf16>(&a, Some(&c0));
        for (j, &e) in row.iter().enumerate() {
            assert!(
                same(w.at::<Bf16>(&a, Some(&c0[j]), j), e),
                "bf16 directed {j}"
            );
        }
        assert!(row[0].exact.is_nan() && row[1].exact == 0.0 && row[2].exact == 0.0);
        let a = vec![-128i8; k];
        let b = vec![-128i8; k * n];
        let c0: Vec<i32> = (0..n as i32).map(|j| i32::MAX - j).collect();
        let w = Widened::new::<Int8>(k, n, &b, n);
        let row = w.row::<Int8>(&a, Some(&c0));
        for (j, &e) in row.iter().enumerate() {
            assert!(same(w.at::<Int8>(&a, Some(&c0[j]), j), e), "int8 {j}");
            assert!(e.exact < 0.0, "wrapped");
        }
    }

    #[test]
    fn bf16_tolerance_scales_with_k() {
        assert!(bf16_tolerance(32, 1.0) < 1e-5);
        assert!(bf16_tolerance(4096, 1.0) > bf16_tolerance(32, 1.0));
        let a = vec![bf16::from_f32(1.5); 4];
        let b = vec![bf16::from_f32(2.0); 4];
        let c = vec![12.0f32];
        let c0 = vec![1.0f32];
        let c1 = vec![13.0f32];
        assert!(verify::<Bf16>(1, 1, 4, &a, 4, &b, 1, None, &c, 1, Outputs::All).is_ok());
        assert!(verify::<Bf16>(1, 1, 4, &a, 4, &b, 1, Some(&c0), &c1, 1, Outputs::All).is_ok());
        assert!(verify::<Bf16>(1, 1, 4, &a, 4, &b, 1, Some(&c0), &c, 1, Outputs::All).is_err());
    }

    /// The FP8 bound: a term meets one rounding more per dot product's lane but there are half
    /// as many dot products, and nothing flushes.
    #[test]
    fn fp8_tolerance() {
        use crate::precision::Hf8Hf8;
        let fp8 = |k, m| float_tolerance(PrecisionKind::Hf8Hf8, k, m);
        assert_eq!(fp8(0, 0.0), 0.0);
        assert!(fp8(0, 1.0) > 0.0);
        assert_eq!(
            fp8(64, 0.0),
            (1.0 + gamma(18.0, 2f64.powi(-24))) * MIN_NORMAL * EVALUATION
        );
        assert!(fp8(64, 1.0) < 1.1e-6 && fp8(64, 1.0) > bf16_tolerance(32, 1.0));
        assert!(fp8(4096, 1.0) < bf16_tolerance(4096, 1.0));
        assert_eq!(
            float_tolerance(PrecisionKind::Bf8Hf8, 100, 3.0),
            fp8(100, 3.0)
        );
        assert_eq!(float_tolerance(PrecisionKind::Int8, 100, 3.0), 0.0);
        assert_eq!(
            float_tolerance(PrecisionKind::Fp16, 100, 3.0),
            bf16_tolerance(100, 3.0)
        );
        // 1.5 * 2 four times, from 1: exact.
        let a = vec![crate::Hf8::from_f32(1.5); 4];
        let b = vec![crate::Hf8::from_f32(2.0); 4];
        let (c0, c1, c) = ([1.0f32], [13.0f32], [12.5f32]);
        let check = |start: Option<&[f32]>, c: &[f32]| {
            verify::<Hf8Hf8>(1, 1, 4, &a, 4, &b, 1, start, c, 1, Outputs::All)
        };
        assert!(check(Some(&c0), &c1).is_ok());
        assert!(check(Some(&c0), &c).is_err());
    }

    #[test]
    fn bf16_tolerance_grows_with_k_and_gives_up_past_the_bound() {
        // Monotonic in K and in the magnitude, and never below the flushes K products can lose.
        let ks = [0, 1, 32, 33, 64, 4096, 1 << 20, 1 << 28];
        for w in ks.windows(2) {
            assert!(
                bf16_tolerance(w[0], 1.0) < bf16_tolerance(w[1], 1.0),
                "{w:?}"
            );
        }
        for k in ks {
            assert!(bf16_tolerance(k, 2.0) > bf16_tolerance(k, 1.0));
            assert!(bf16_tolerance(k, 0.0) >= k as f64 * MIN_NORMAL);
        }
        assert_eq!(bf16_tolerance(0, 0.0), 0.0);
        // Where `h u >= 1`, `h u / (1 - h u)` is negative and bounds nothing: no finite
        // tolerance is claimed.
        for k in [32 << 24, usize::MAX] {
            assert_eq!(bf16_tolerance(k, 1.0), f64::INFINITY, "{k}");
            assert!(may_overflow(PrecisionKind::Bf16, k, 1.0));
        }
    }
}

/// The step-by-step `f32` model of a fused epilogue (see the [module docs](self)):
/// `out[i][n]` for an `M x N` accumulator `acc` (the exact product for int8, the plain GEMM's
/// output for bf16), with the weights' column sums `col_sums` (needed when the epilogue has a
/// zero point). The fused path equals it bit for bit.
///
/// # Errors
/// [`GemmError::DimensionMismatch`] when `out` is not the accumulator's shape; slice errors
/// for the accumulator, the output or the residual; a missing column sum or parameter is an
/// [`GemmError::InvalidEpilogue`].
pub fn linear_model<P: Precision, O: Output>(
    acc: MatRef<'_, P::C>,
    col_sums: Option<&[i32]>,
    epilogue: &Epilogue<'_>,
    out: MatMut<'_, O>,
) -> Result<(), GemmError> {
    let (m, n) = (acc.rows, acc.cols);
    check_sizes(&[
        ("the rows of the accumulator and of the output", m, out.rows),
        (
            "the columns of the accumulator and of the output",
            n,
            out.cols,
        ),
    ])?;
    let (acc, ldacc, out, ldo) = (acc.data, acc.ld, out.data, out.ld);
    check_slice(Operand::C, m, n, ldacc, acc.len())?;
    check_slice(Operand::C, m, n, ldo, out.len())?;
    if matches!(epilogue.w_scale, WeightScale::Group { .. }) {
        return Err(EpilogueError::GroupedScales.into());
    }
    let params = Params::new(epilogue, m, n)?;
    epilogue.check_output::<O>()?;
    let int_acc = P::KIND.is_integer();
    for i in 0..m {
        for j in 0..n {
            let sum = match (epilogue.activation_row(i).1, col_sums) {
                (0, _) => 0,
                // No sums are stored when K = 0: every one is 0.
                (_, Some([])) => 0,
                (_, Some(s)) => *s.get(j).ok_or(EpilogueError::MissingColumnSums)?,
                (_, None) => return Err(EpilogueError::MissingColumnSums.into()),
            };
            let r = params.residual(i, j).map(|(r, _)| r as f32);
            out[i * ldo + j] = epilogue::model_one::<O>(
                epilogue,
                int_acc,
                acc[i * ldacc + j].to_f64(),
                sum,
                (i, j),
                r,
            );
        }
    }
    Ok(())
}

/// [`linear_model`] for an epilogue with per-K-group weight scales
/// ([`WeightScale::Group`], int8 precisions): computes each group's exact integer product of
/// `A` (`M x K`, row-major) and `B` (`K x N`, stored as [`BRef`] says) and its column sums,
/// then performs the fused path's steps on them. The fused path equals it bit for bit.
///
/// # Errors
/// [`GemmError::DimensionMismatch`] when A, B and the output do not make a product; slice
/// errors for A, B, the output or the residual; [`GemmError::InvalidEpilogue`] for an
/// epilogue without group scales, bf16, or a group that is not a positive multiple of 64;
/// missing scales or parameters.
pub fn linear_model_grouped<P: Precision, O: Output>(
    a: MatRef<'_, P::A>,
    b: BRef<'_, P::B>,
    epilogue: &Epilogue<'_>,
    out: MatMut<'_, O>,
) -> Result<(), GemmError> {
    let (m, n, k) = (a.rows, b.n, b.k);
    check_product(m, a.cols, (k, n), (out.rows, out.cols))?;
    let (a, lda, out, ldo) = (a.data, a.ld, out.data, out.ld);
    check_slice(Operand::A, m, k, lda, a.len())?;
    let (b, ldb) = row_major(b)?;
    let b = &b[..];
    check_slice(Operand::C, m, n, ldo, out.len())?;
    let WeightScale::Group { group, scales } = epilogue.w_scale else {
        return Err(EpilogueError::NotGrouped.into());
    };
    check_group(P::KIND, group)?;
    epilogue::check_group_scales((n, k), group, scales)?;
    let params = Params::new(epilogue, m, n)?;
    epilogue.check_output::<O>()?;
    let groups = exact_groups::<P>(m, n, k, a, lda, b, ldb, group);
    let g_count = k.div_ceil(group);
    for i in 0..m {
        for j in 0..n {
            let r = params.residual(i, j).map(|(r, _)| r as f32);
            let per_group = (0..g_count).map(|g| groups.at(i, g, j));
            out[i * ldo + j] = epilogue::model_grouped::<O>(epilogue, per_group, (i, j), n, r);
        }
    }
    Ok(())
}

/// Every group's exact product and column sum, wrapped to `i32` as the tiles wrap them.
struct GroupProducts {
    n: usize,
    groups: usize,
    /// `[i][g][j]`.
    acc: Vec<i32>,
    /// `[g][j]`.
    sums: Vec<i32>,
}

impl GroupProducts {
    fn at(&self, i: usize, g: usize, j: usize) -> (i32, i32) {
        (
            self.acc[(i * self.groups + g) * self.n + j],
            self.sums[g * self.n + j],
        )
    }
}

/// The products of each group of `group` rows of K (the `f64` sums are exact: each product is
/// below 2^15 in magnitude).
#[allow(clippy::too_many_arguments)]
fn exact_groups<P: Precision>(
    m: usize,
    n: usize,
    k: usize,
    a: &[P::A],
    lda: usize,
    b: &[P::B],
    ldb: usize,
    group: usize,
) -> GroupProducts {
    let groups = k.div_ceil(group);
    let widened = Widened::new::<P>(k, n, b, ldb);
    let mut acc = vec![0i32; m * groups * n];
    let mut sums = vec![0i32; groups * n];
    let mut row = vec![0f64; n];
    for g in 0..groups {
        let ks = g * group..((g + 1) * group).min(k);
        row.iter_mut().for_each(|x| *x = 0.0);
        for kk in ks.clone() {
            for (s, x) in row.iter_mut().zip(&widened.values[kk * n..(kk + 1) * n]) {
                *s += x;
            }
        }
        for (s, &x) in sums[g * n..(g + 1) * n].iter_mut().zip(&row) {
            *s = x as i64 as i32;
        }
        for i in 0..m {
            row.iter_mut().for_each(|x| *x = 0.0);
            for kk in ks.clone() {
                let av = a[i * lda + kk].to_f64();
                if av != 0.0 {
                    for (s, x) in row.iter_mut().zip(&widened.values[kk * n..(kk + 1) * n]) {
                        *s += av * x;
                    }
                }
            }
            let at = (i * groups + g) * n;
            for (o, &x) in acc[at..at + n].iter_mut().zip(&row) {
                *o = x as i64 as i32;
            }
        }
    }
    GroupProducts {
        n,
        groups,
        acc,
        sums,
    }
}

/// The fused path's refusals of per-K-group scales, for the references.
fn check_group(kind: PrecisionKind, group: usize) -> Result<(), EpilogueError> {
    if !kind.is_integer() {
        Err(EpilogueError::GroupScalesForFloats)
    } else if group == 0 || !group.is_multiple_of(64) {
        Err(EpilogueError::GroupSize(group))
    } else {
        Ok(())
    }
}

/// An epilogue's inputs, checked, for the references.
struct Params<'e, 'a> {
    e: &'e Epilogue<'a>,
}

impl<'e, 'a> Params<'e, 'a> {
    fn new(e: &'e Epilogue<'a>, m: usize, n: usize) -> Result<Self, GemmError> {
        if let WeightScale::Channel(s) = e.w_scale {
            if s.len() < n {
                return Err(GemmError::DimensionMismatch {
                    what: "per-channel weight scales and N",
                    expected: n,
                    found: s.len(),
                });
            }
        }
        // Group scales are checked against K where K is known (`group_scale`).
        if let Some(b) = e.bias.filter(|b| b.len() < n) {
            return Err(GemmError::DimensionMismatch {
                what: "bias values and N",
                expected: n,
                found: b.len(),
            });
        }
        if let Some((r, _)) = e.residual {
            let (len, ld) = r.len_and_ld();
            check_slice(Operand::Residual, m, n, ld, len)?;
        }
        e.check_rows(m)?;
        Ok(Params { e })
    }

    /// The residual element (exact, as `f64`) and beta.
    fn residual(&self, i: usize, j: usize) -> Option<(f64, f64)> {
        let (r, beta) = self.e.residual?;
        let x = match r {
            Residual::F32 { data, ld } => f64::from(data[i * ld + j]),
            Residual::Bf16 { data, ld } => f64::from(data[i * ld + j].to_f32()),
        };
        Some((x, f64::from(beta)))
    }

    /// The exact scale of row `i` and column `j`: `alpha * a_scale[i] * w_scale[j]` in `f64`
    /// (1 with group scales, which [`Params::group_scale`] gives).
    fn scale(&self, i: usize, j: usize) -> f64 {
        let w = match self.e.w_scale {
            WeightScale::Tensor(w) => w,
            WeightScale::Channel(w) => w[j],
            WeightScale::Group { .. } => return 1.0,
        };
        f64::from(self.e.alpha) * f64::from(self.e.activation_row(i).0) * f64::from(w)
    }

    /// The exact scale of row `i`, group `g` and column `j` of an `n`-column product, or a
    /// missing parameter error.
    fn group_scale(&self, i: usize, g: usize, j: usize, n: usize) -> Result<f64, GemmError> {
        let WeightScale::Group { scales, .. } = self.e.w_scale else {
            return Ok(self.scale(i, j));
        };
        let w = scales.get(g * n + j).ok_or(GemmError::DimensionMismatch {
            what: "per-group weight scales and ceil(K / group) * N",
            expected: (g + 1) * n,
            found: scales.len(),
        })?;
        let a_scale = self.e.activation_row(i).0;
        Ok(f64::from(self.e.alpha) * f64::from(a_scale) * f64::from(*w))
    }

    fn bias(&self, j: usize) -> f64 {
        self.e.bias.map_or(0.0, |b| f64::from(b[j]))
    }
}

/// One output of a linear layer computed in `f64`, and the bound on the fused path's error
/// ([module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearExpected {
    /// The value before the output conversion (`act(X) + beta R`), in `f64`.
    pub value: f64,
    /// The bound on `|computed - value|` before the output conversion.
    pub tolerance: f64,
}

/// The bound of the [module docs](self) for one output: `p` the exact scaled accumulator
/// `s q`, `scale` = `s`, `acc_err` the accumulator's own bound (0 for int8), `bias`, the
/// activation, and the residual term `beta R`.
pub fn linear_tolerance(
    p: f64,
    scale: f64,
    acc_err: f64,
    bias: f64,
    activation: Activation,
    residual: f64,
) -> LinearExpected {
    let u = 2f64.powi(-24);
    let x = p + bias;
    let e_pre = 6.0 * u * (p.abs() + bias.abs()) + 1.01 * scale.abs() * acc_err + 3.0 * MIN_NORMAL;
    let act = activation.exact(x);
    let e_act = activation.lipschitz() * e_pre + Activation::TOLERANCE * (1.0 + x.abs() + e_pre);
    let tolerance = e_act + 3.0 * u * (act.abs() + e_act + residual.abs());
    LinearExpected {
        value: act + residual,
        tolerance: tolerance * EVALUATION,
    }
}

/// An output of [`verify_linear`] outside its bound.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearMismatch {
    /// Row and column.
    pub at: (usize, usize),
    /// The output, as `f64`.
    pub got: f64,
    /// The `f64` reference and its bound (before the output conversion).
    pub expected: LinearExpected,
}

impl fmt::Display for LinearMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "output ({}, {}) is {}; the f64 reference gives {} within {:e}",
            self.at.0, self.at.1, self.got, self.expected.value, self.expected.tolerance
        )
    }
}

impl std::error::Error for LinearMismatch {}

/// Checks the output of [`Gemm::run_with`](crate::Gemm::run_with) for `A` (`M x K`,
/// row-major) times `B` (`K x N`, stored as [`BRef`] says: `K x N` or `N x K`) with
/// `epilogue` against the `f64` reference within [`linear_tolerance`], every output. Finite
/// inputs are assumed (a NaN or infinite output where the reference is finite is a mismatch).
///
/// ```
/// use amx_gemm::reference::verify_linear;
/// use amx_gemm::{Backend, BRef, Epilogue, Gemm, Int8, MatMut, MatRef, PackedB};
///
/// let (m, n, k) = (2, 3, 64);
/// let a = vec![3i8; m * k];
/// let w = vec![-2i8; n * k]; // weights stored N x K
/// let weights = PackedB::<Int8>::pack_ref(BRef::n_by_k(&w, k, n)).unwrap();
/// let e = Epilogue::new().alpha(0.01);
/// let mut y = vec![0f32; m * n];
/// let gemm = Gemm::new().backend(Backend::Emulated);
/// gemm.run_with(MatRef::new(&a, m, k), &weights, MatMut::new(&mut y, m, n), &e).unwrap();
/// let checked = verify_linear::<Int8, f32>(
///     MatRef::new(&a, m, k),
///     BRef::n_by_k(&w, k, n),
///     &e,
///     MatRef::new(&y, m, n),
/// )
/// .unwrap();
/// assert_eq!(checked.checked, m * n);
/// ```
///
/// # Errors
/// [`VerifyError::LinearMismatch`] for the first output outside its bound;
/// [`VerifyError::Input`] for arguments the reference cannot read (shapes that do not make a
/// product, slices too short, missing parameters).
pub fn verify_linear<P: Precision, O: Output>(
    a: MatRef<'_, P::A>,
    b: BRef<'_, P::B>,
    epilogue: &Epilogue<'_>,
    out: MatRef<'_, O>,
) -> Result<Verified, VerifyError> {
    let (m, n, k) = (a.rows, b.n, b.k);
    check_product(m, a.cols, (k, n), (out.rows, out.cols))?;
    let (a, lda, out, ldo) = (a.data, a.ld, out.data, out.ld);
    check_slice(Operand::A, m, k, lda, a.len())?;
    let (b, ldb) = row_major(b)?;
    let b = &b[..];
    check_slice(Operand::C, m, n, ldo, out.len())?;
    let params = Params::new(epilogue, m, n)?;
    epilogue.check_output::<O>().map_err(GemmError::from)?;
    let mut verified = Verified {
        checked: m * n,
        total: m * n,
        worst_ratio: 0.0,
    };
    if m == 0 || n == 0 {
        return Ok(verified);
    }
    let widened = Widened::new::<P>(k, n, b, ldb);
    let int = P::KIND.is_integer();
    // Column sums of B, exact, for the zero point.
    let mut col_sums = vec![0f64; n];
    for kk in 0..k {
        for (s, x) in col_sums
            .iter_mut()
            .zip(&widened.values[kk * n..(kk + 1) * n])
        {
            *s += x;
        }
    }
    let grouped = match epilogue.w_scale {
        WeightScale::Group { group, .. } => {
            check_group(P::KIND, group).map_err(GemmError::from)?;
            Some(exact_groups::<P>(m, n, k, a, lda, b, ldb, group))
        }
        _ => None,
    };
    let mut worst = 0f64;
    for i in 0..m {
        let row = widened.row::<P>(&a[i * lda..i * lda + k], None);
        let zp = epilogue.activation_row(i).1;
        for j in 0..n {
            let res = params.residual(i, j).map_or(0.0, |(r, beta)| r * beta);
            if let Some(groups) = &grouped {
                // sum_g s_g q_g, each q_g exact; every d_g is rounded three times (f32 of q_g,
                // of s_g, of the product) and each of the G - 1 additions once: the sum's
                // error is below (G + 3) u sum_g |s_g q_g|, carried as the accumulator's bound.
                let (mut p, mut mag) = (0f64, 0f64);
                for g in 0..groups.groups {
                    let (acc, sum) = groups.at(i, g, j);
                    let q = f64::from(acc.wrapping_sub(zp.wrapping_mul(sum)));
                    let d = params.group_scale(i, g, j, n)? * q;
                    p += d;
                    mag += d.abs();
                }
                let err = (groups.groups as f64 + 3.0) * 2f64.powi(-24) * mag;
                let expected =
                    linear_tolerance(p, 1.0, err, params.bias(j), epilogue.activation, res);
                let got = out[i * ldo + j].to_f64();
                if let Some(mismatch) = check_one::<O>(epilogue, expected, got, (i, j), &mut worst)
                {
                    return Err(VerifyError::LinearMismatch(mismatch));
                }
                continue;
            }
            let (q, acc_err) = if int {
                // The exact integer, wrapped to i32 as the tiles wrap it.
                let q = row[j].exact as i64 - (f64::from(zp) * col_sums[j]) as i64;
                (f64::from(q as i32), 0.0)
            } else {
                (row[j].exact, float_tolerance(P::KIND, k, row[j].magnitude))
            };
            let s = params.scale(i, j);
            let expected =
                linear_tolerance(s * q, s, acc_err, params.bias(j), epilogue.activation, res);
            let got = out[i * ldo + j].to_f64();
            if let Some(mismatch) = check_one::<O>(epilogue, expected, got, (i, j), &mut worst) {
                return Err(VerifyError::LinearMismatch(mismatch));
            }
        }
    }
    verified.worst_ratio = worst;
    Ok(verified)
}

/// B as a row-major `K x N` slice and its leading dimension: borrowed when stored so, else a
/// dense copy of the transpose (the references read B by rows of K).
fn row_major<'b, T: Copy>(b: BRef<'b, T>) -> Result<(Cow<'b, [T]>, usize), GemmError> {
    let (rows, cols) = b.stored();
    check_slice(Operand::B, rows, cols, b.ld, b.data.len())?;
    match b.layout {
        BLayout::KxN => Ok((Cow::Borrowed(b.data), b.ld)),
        BLayout::NxK => {
            let len = b.k.saturating_mul(b.n);
            let mut dense = Vec::new();
            dense
                .try_reserve_exact(len)
                .map_err(|_| GemmError::OutOfMemory {
                    bytes: len.saturating_mul(std::mem::size_of::<T>()),
                })?;
            for kk in 0..b.k {
                dense.extend((0..b.n).map(|nn| b.data[nn * b.ld + kk]));
            }
            Ok((Cow::Owned(dense), b.n))
        }
    }
}

/// One output of [`verify_linear`] against its expectation: `None` when within the bound
/// (updating `worst`, the largest ratio of error to bound), else the mismatch.
fn check_one<O: Output>(
    epilogue: &Epilogue<'_>,
    mut expected: LinearExpected,
    got: f64,
    at: (usize, usize),
    worst: &mut f64,
) -> Option<LinearMismatch> {
    let out_int = matches!(O::CODE, 2 | 3);
    let (lo, hi) = if O::CODE == 2 {
        (0.0, 255.0)
    } else {
        (-128.0, 127.0)
    };
    let ok = if out_int {
        let scale = f64::from(epilogue.out_scale);
        let v = expected.value / scale;
        let e = expected.tolerance / scale + 3.0 * 2f64.powi(-24) * v.abs();
        let z = f64::from(epilogue.out_zero_point);
        let q_lo = ((v - e).round_ties_even() + z).clamp(lo, hi);
        let q_hi = ((v + e).round_ties_even() + z).clamp(lo, hi);
        let ratio = if q_lo == q_hi { 0.0 } else { 1.0 };
        *worst = worst.max(ratio * f64::from(got != q_lo && got != q_hi));
        (q_lo..=q_hi).contains(&got)
    } else {
        if O::CODE == 1 {
            // bf16 output: one more rounding, to 8 significant bits.
            expected.tolerance += 2f64.powi(-8) * (expected.value.abs() + expected.tolerance);
        }
        let err = (got - expected.value).abs();
        if expected.tolerance > 0.0 {
            *worst = worst.max(err / expected.tolerance);
        }
        err <= expected.tolerance
    };
    (!ok).then_some(LinearMismatch { at, got, expected })
}
