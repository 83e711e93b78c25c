//! The exact reference model of
//! [semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula):
//! integer arithmetic on significands, one
//! round-to-nearest-even at an unbounded exponent, then the FTZ rule. No host floating point is
//! used, so the result does not depend on MXCSR or on how the compiler treats floats.
//!
//! This is the oracle of the tests and the fallback of the vector kernels for lanes that end in
//! a NaN (whose payload and priority the hardware FMA does not reproduce).

use super::{
    daz, get_dword, is_nan, nan_result, Half, DEFAULT_NAN, FRAC_MASK, INF, MIN_NORMAL, ONE, SIGN,
};

/// `fma32(x, y, acc)` of
/// [semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula),
/// on fp32 bit patterns:
/// 1. DAZ on `x`, `y` and `acc`;
/// 2. the first NaN of `x, y, acc`, quieted (bit 22 set, sign and payload kept);
/// 3. inf*0 (after DAZ, so inf*denormal too) and inf + -inf give the default NaN `0xFFC00000`;
/// 4. other infinities propagate;
/// 5. otherwise `x*y + acc` exactly, rounded once to nearest even, overflowing to +-inf;
/// 6. zero results: all addends zero gives -0 only if every addend is -0; exact cancellation of
///    nonzero values gives +0;
/// 7. FTZ with tininess after rounding: if `|v|` rounded to 24 significant bits with an
///    unbounded exponent is below 2^-126, the result is a zero with the sign of `v`.
pub(crate) fn fma32(x: u32, y: u32, acc: u32) -> u32 {
    let (x, y, acc) = (daz(x), daz(y), daz(acc));
    if is_nan(x) || is_nan(y) || is_nan(acc) {
        return nan_result(x, y, acc);
    }
    let prod_sign = (x ^ y) & SIGN;
    let (xm, ym, am) = (x & !SIGN, y & !SIGN, acc & !SIGN);
    // After DAZ every finite nonzero operand is normal, so "magnitude bits == 0" means zero.
    if (xm == INF && ym == 0) || (ym == INF && xm == 0) {
        return DEFAULT_NAN;
    }
    if xm == INF || ym == INF {
        if am == INF && acc & SIGN != prod_sign {
            return DEFAULT_NAN;
        }
        return prod_sign | INF;
    }
    if am == INF {
        return acc;
    }
    if xm == 0 || ym == 0 {
        // The product is an exact zero of sign prod_sign.
        return if am == 0 {
            // -0 only when both addends are -0.
            prod_sign & acc
        } else {
            // A normal acc plus zero is acc itself: exact, normal, nothing to round or flush.
            acc
        };
    }
    let product = Term {
        neg: prod_sign != 0,
        mag: u128::from(significand(xm)) * u128::from(significand(ym)),
        exp: exponent(xm) + exponent(ym),
    };
    if am == 0 {
        return round_pack(product.neg, product.mag, product.exp);
    }
    let addend = Term {
        neg: acc & SIGN != 0,
        mag: u128::from(significand(am)),
        exp: exponent(am),
    };
    let sum = exact_sum(product, addend);
    if sum.mag == 0 {
        // Exact cancellation of nonzero values: +0 under round-to-nearest.
        return 0;
    }
    round_pack(sum.neg, sum.mag, sum.exp)
}

/// `add32(x, y)` of
/// [semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula):
/// `fma32` with a single addend pair.
///
/// It equals `fma32(x, 1.0, y)` in every case: DAZ applies to `x` and `y` alike, the NaN
/// priority is `x` then `y` (1.0 is never a NaN), `x*1.0` is exactly `x` with its sign (so the
/// zero-sign rules see the same addends), inf*0 cannot occur, inf + -inf is still the default
/// NaN, and the single rounding and FTZ act on the same exact value `x + y`.
pub(crate) fn add32(x: u32, y: u32) -> u32 {
    fma32(x, ONE, y)
}

/// One TDPBF16PS/TDPFP16PS output element, literally as
/// [semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula)
/// writes it: C
/// element `c`, row `m` of A, column `n` of B, `k` steps (all already within the tile).
pub(super) fn dot_element(
    c: u32,
    a: &[u8; 1024],
    b: &[u8; 1024],
    m: usize,
    n: usize,
    k: usize,
    half: Half,
) -> u32 {
    let bits = |h: u16| half.to_f32_bits(h);
    // Two fp32 lanes, both starting at +0.0, advanced in increasing k.
    let (mut te, mut to) = (0u32, 0u32);
    for kk in 0..k {
        let (x, y) = (get_dword(a, m, kk), get_dword(b, kk, n));
        te = fma32(bits(x as u16), bits(y as u16), te);
        to = fma32(bits((x >> 16) as u16), bits((y >> 16) as u16), to);
    }
    add32(c, add32(te, to))
}

/// A finite nonzero exact value `(-1)^neg * mag * 2^exp`.
#[derive(Clone, Copy)]
struct Term {
    neg: bool,
    mag: u128,
    exp: i32,
}

/// The 24-bit significand of a normal magnitude (implicit bit included).
#[inline]
fn significand(m: u32) -> u32 {
    (m & FRAC_MASK) | MIN_NORMAL
}

/// The power of two of the significand's least significant bit: `m = significand * 2^exponent`.
#[inline]
fn exponent(m: u32) -> i32 {
    (m >> 23) as i32 - 150
}

/// Number of significant bits of `v`.
#[inline]
fn bit_len(v: u128) -> i32 {
    128 - v.leading_zeros() as i32
}

/// The exact sum of two finite nonzero values, except that bits of the smaller one lying far
/// below the larger one are OR-ed ("jammed") into a sticky bit.
///
/// The larger-magnitude term (by position of its top bit) is placed with its top bit at bit
/// 125. Jamming happens only when the smaller term's lowest bit falls below bit 0; its top bit
/// is then below bit 48, so the result has its top bit at 124 or 125 and is rounded at bit 100
/// or higher. The jammed value is the odd integer next to the true (non-integer) value, and
/// every rounding boundary there is an even integer, so both round the same way.
fn exact_sum(p: Term, q: Term) -> Term {
    let top = |t: &Term| t.exp + bit_len(t.mag);
    let (big, small) = if top(&p) >= top(&q) { (p, q) } else { (q, p) };
    let shift = 126 - bit_len(big.mag); // >= 78: the terms have at most 48 bits
    let frame = big.exp - shift; // power of two of bit 0
    let big_mag = big.mag << shift;
    let d = small.exp - frame;
    let small_mag = if d >= 0 {
        // top(small) <= top(big) keeps the shifted value below bit 126.
        small.mag << d
    } else if d <= -128 {
        u128::from(small.mag != 0)
    } else {
        let s = (-d) as u32;
        (small.mag >> s) | u128::from(small.mag & ((1u128 << s) - 1) != 0)
    };
    if big.neg == small.neg {
        Term {
            neg: big.neg,
            mag: big_mag + small_mag,
            exp: frame,
        }
    } else if big_mag >= small_mag {
        Term {
            neg: big.neg,
            mag: big_mag - small_mag,
            exp: frame,
        }
    } else {
        // Equal top bits, smaller significand on the "big" side; nothing was jammed.
        Term {
            neg: small.neg,
            mag: small_mag - big_mag,
            exp: frame,
        }
    }
}

/// Rounds `(-1)^neg * mag * 2^exp` (`mag != 0`) to 24 significant bits, nearest even, with an
/// unbounded exponent; then overflows to infinity or flushes to a signed zero (section 10.7:
/// anything below 2^-126 after this rounding, including exactly representable denormals).
fn round_pack(neg: bool, mag: u128, exp: i32) -> u32 {
    let len = bit_len(mag);
    let (sig, lsb_exp) = if len > 24 {
        let s = (len - 24) as u32;
        let mut q = mag >> s;
        let rem = mag & ((1u128 << s) - 1);
        let half = 1u128 << (s - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q += 1;
        }
        if q == 1 << 24 {
            (q >> 1, exp + s as i32 + 1)
        } else {
            (q, exp + s as i32)
        }
    } else {
        (mag << (24 - len), exp - (24 - len))
    };
    // sig is in [2^23, 2^24): the value is 1.f * 2^(lsb_exp + 23), biased exponent lsb_exp + 150.
    let biased = lsb_exp + 150;
    let sign = if neg { SIGN } else { 0 };
    if biased >= 255 {
        sign | INF
    } else if biased <= 0 {
        sign
    } else {
        sign | ((biased as u32) << 23) | (sig as u32 & FRAC_MASK)
    }
}
