//! Portable fast paths: integer loops for TDPB*D, and `f32::mul_add` plus fix-ups for the
//! floating-point products (the recipe at the end of
//! [semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula)).
//!
//! `f32::mul_add` is correctly rounded (IEEE fusedMultiplyAdd with gradual underflow). After DAZ
//! of its inputs it already matches `fma32` except in three places, all detected from its result:
//! * NaN results: the NaN is re-selected by the section 10 priority (or the default NaN);
//! * denormal results: section 10.7 flushes them to a zero with the result's sign;
//! * results of exactly +-2^-126: gradual underflow rounds the exact value `v` at denormal
//!   precision, the hardware rounds at 24 bits with an unbounded exponent, so the result must
//!   be flushed iff `|v| < 2^-126 - 2^-151`. That comparison is made exactly with an f64 TwoSum.
//!
//! Every other result is identical in both models: `|v| >= 2^-126` rounds the same way with
//! both exponent ranges, and a result above 2^-126 in magnitude implies `|v| > 2^-126`; zero
//! signs, infinities and overflow follow IEEE 754 round-to-nearest in both.
//!
//! This relies on the default floating-point environment (round to nearest, no DAZ/FTZ), which
//! Rust code may assume.

use super::{
    bf16_to_f32_bits, daz, dwords, fp16_to_f32_bits, get_dword, nan_result, set_dword, Half,
    DWORDS, INF, MIN_NORMAL, ROWS, SIGN,
};

/// `fma32`
/// ([semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula))
/// through `f32::mul_add`. Bit-identical to
/// [`super::exact::fma32`].
#[inline(always)]
pub(super) fn fma32_fast(x: u32, y: u32, acc: u32) -> u32 {
    let (x, y, acc) = (daz(x), daz(y), daz(acc));
    let r = f32::from_bits(x)
        .mul_add(f32::from_bits(y), f32::from_bits(acc))
        .to_bits();
    fix_up(x, y, acc, r)
}

/// `add32`
/// ([semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula))
/// through an f32 addition. Bit-identical to
/// [`super::exact::add32`].
#[inline(always)]
pub(super) fn add32_fast(x: u32, y: u32) -> u32 {
    let (x, y) = (daz(x), daz(y));
    let r = (f32::from_bits(x) + f32::from_bits(y)).to_bits();
    fix_up(x, super::ONE, y, r)
}

/// Turns the IEEE result `r` of `x*y + acc` (inputs already DAZ'd) into the AMX result.
#[inline(always)]
fn fix_up(x: u32, y: u32, acc: u32, r: u32) -> u32 {
    let mag = r & !SIGN;
    // One unsigned compare catches both denormals and exactly 2^-126 (magnitudes 1..=2^-126).
    if mag.wrapping_sub(1) < MIN_NORMAL {
        return fix_tiny(x, y, acc, r);
    }
    if mag > INF {
        return fix_nan(x, y, acc);
    }
    r
}

/// The NaN rules of section 10, off the hot path.
#[cold]
#[inline(never)]
fn fix_nan(x: u32, y: u32, acc: u32) -> u32 {
    nan_result(x, y, acc)
}

/// 2^-126 - 2^-151 = (2 - 2^-24) * 2^-127: below it, RN24 at an unbounded exponent gives a value
/// below 2^-126; at it, the tie goes to the even significand of 2^-126.
pub(super) const FLUSH_BELOW: f64 = f64::from_bits(((1023 - 127) << 52) | (0xFF_FFFF << 28));

/// The flush rule for an IEEE result `r` with `0 < |r| <= 2^-126` (inputs DAZ'd, finite).
#[cold]
#[inline(never)]
fn fix_tiny(x: u32, y: u32, acc: u32, r: u32) -> u32 {
    let sign = r & SIGN;
    if r & !SIGN != MIN_NORMAL {
        // A denormal IEEE result means |v| < 2^-126 - 2^-150: tiny at any precision.
        return sign;
    }
    // |r| = 2^-126, so |v| is within 2^-150 of it. Compare v with the threshold exactly: the
    // product of two 24-bit significands is exact in f64, and TwoSum gives s + err == p + z
    // exactly (no overflow or f64 underflow is possible at these magnitudes).
    let p = f64::from(f32::from_bits(x)) * f64::from(f32::from_bits(y));
    let z = f64::from(f32::from_bits(acc));
    let s = p + z;
    let bv = s - p;
    let err = (p - (s - bv)) + (z - bv);
    let (s, err) = if sign != 0 { (-s, -err) } else { (s, err) };
    // s = RN53(v) and the threshold is an f64, so s < T implies v < T and s > T implies v > T.
    if s < FLUSH_BELOW || (s == FLUSH_BELOW && err < 0.0) {
        sign
    } else {
        r
    }
}

/// `TDPB[SU][SU]D`: 32-bit wrapping sums of 8-bit products, in plain Rust for any target.
pub(super) fn dot_int8_portable(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    shape: (usize, usize, usize),
    a_signed: bool,
    b_signed: bool,
) {
    dot_int8_any(c, a, b, shape, a_signed, b_signed);
}

/// Dispatches on signedness.
#[inline(always)]
fn dot_int8_any(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    shape: (usize, usize, usize),
    a_signed: bool,
    b_signed: bool,
) {
    // Signedness as constants, so the byte extension is not a branch in the inner loop.
    match (a_signed, b_signed) {
        (true, true) => dot_int8_impl::<true, true>(c, a, b, shape),
        (true, false) => dot_int8_impl::<true, false>(c, a, b, shape),
        (false, true) => dot_int8_impl::<false, true>(c, a, b, shape),
        (false, false) => dot_int8_impl::<false, false>(c, a, b, shape),
    }
}

/// Sign- or zero-extends a byte.
#[inline(always)]
fn ext<const SIGNED: bool>(x: u8) -> i32 {
    if SIGNED {
        i32::from(x as i8)
    } else {
        i32::from(x)
    }
}

/// The integer loop for one signedness combination; `(m_rows, n_dwords, k_dwords)` clamped.
///
/// Written for the auto-vectoriser: the products are accumulated per byte position (64 lanes,
/// B widened to i16 once per call) and the four lanes of each dword are summed at the end,
/// which is the same sum mod 2^32.
#[inline(always)]
fn dot_int8_impl<const SA: bool, const SB: bool>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
) {
    let mut b_wide = [[0i16; 64]; ROWS];
    for (dst, src) in b_wide.iter_mut().zip(b.chunks_exact(64)).take(k_dwords) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = ext::<SB>(s) as i16;
        }
    }
    for (m, a_row) in a.chunks_exact(64).enumerate().take(m_rows) {
        let mut lanes = [0i32; 64];
        for (a4, b_k) in a_row.chunks_exact(4).zip(&b_wide).take(k_dwords) {
            let a4 = [a4[0], a4[1], a4[2], a4[3]].map(|x| ext::<SA>(x) as i16);
            let mut a_rep = [0i16; 64];
            for quad in a_rep.chunks_exact_mut(4) {
                quad.copy_from_slice(&a4);
            }
            for ((l, &x), &y) in lanes.iter_mut().zip(&a_rep).zip(b_k) {
                // |product| <= 2^16: fits; the running sum wraps like the hardware's.
                *l = l.wrapping_add(i32::from(x) * i32::from(y));
            }
        }
        for (n, quad) in lanes.chunks_exact(4).enumerate().take(n_dwords) {
            let sum = quad
                .iter()
                .fold(get_dword(c, m, n) as i32, |s, &x| s.wrapping_add(x));
            set_dword(c, m, n, sum as u32);
        }
    }
}

/// TDPBF16PS/TDPFP16PS on the scalar fast path, using the x86 `fma` instructions when the CPU
/// has them (otherwise `f32::mul_add` is a library call, still correctly rounded).
pub(super) fn dot_half(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports FMA (checked just above).
        unsafe { dot_half_fma(c, a, b, m_rows, n_dwords, k_dwords, half) };
        return;
    }
    dot_half_portable(c, a, b, m_rows, n_dwords, k_dwords, half);
}

/// [`dot_half`] compiled for the baseline target (no FMA instructions assumed).
pub(super) fn dot_half_portable(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    match half {
        Half::Bf16 => dot_half_impl(c, a, b, m_rows, n_dwords, k_dwords, bf16_to_f32_bits),
        Half::Fp16 => dot_half_impl(c, a, b, m_rows, n_dwords, k_dwords, fp16_to_f32_bits),
    }
}

/// [`dot_half`] compiled with the x86 `fma` feature, so `f32::mul_add` is one VFMADD.
///
/// # Safety
/// The CPU must support FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
pub(super) unsafe fn dot_half_fma(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    match half {
        Half::Bf16 => dot_half_impl(c, a, b, m_rows, n_dwords, k_dwords, bf16_to_f32_bits),
        Half::Fp16 => dot_half_impl(c, a, b, m_rows, n_dwords, k_dwords, fp16_to_f32_bits),
    }
}

/// The element loop, monomorphised per input format and inlined into each target-feature
/// wrapper. Same arithmetic as the exact model's element chain, reordered so that the
/// 2 x N accumulator chains of a row advance together instead of one after the other: they are
/// independent, so the FMA latency is hidden. B is converted to fp32 once per call.
#[inline(always)]
fn dot_half_impl(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    conv: impl Fn(u16) -> u32 + Copy,
) {
    let (m_rows, n_dwords, k_dwords) = super::clamp(m_rows, n_dwords, k_dwords);
    let (at, bt) = (dwords(a), dwords(b));
    let mut b_even = [[0u32; DWORDS]; ROWS];
    let mut b_odd = [[0u32; DWORDS]; ROWS];
    for ((src, even), odd) in bt.iter().zip(&mut b_even).zip(&mut b_odd).take(k_dwords) {
        for ((&v, e), o) in src.iter().zip(even.iter_mut()).zip(odd.iter_mut()) {
            *e = conv(v as u16);
            *o = conv((v >> 16) as u16);
        }
    }
    for (m, a_row) in at.iter().enumerate().take(m_rows) {
        // Lanes start at +0.0.
        let mut te = [0u32; DWORDS];
        let mut to = [0u32; DWORDS];
        for ((&x, even), odd) in a_row.iter().zip(&b_even).zip(&b_odd).take(k_dwords) {
            let (xe, xo) = (conv(x as u16), conv((x >> 16) as u16));
            for n in 0..n_dwords {
                te[n] = fma32_fast(xe, even[n], te[n]);
                to[n] = fma32_fast(xo, odd[n], to[n]);
            }
        }
        for n in 0..n_dwords {
            let v = add32_fast(get_dword(c, m, n), add32_fast(te[n], to[n]));
            set_dword(c, m, n, v);
        }
    }
}
