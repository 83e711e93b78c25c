//! The AMX-COMPLEX products TCMMIMFP16PS and TCMMRLFP16PS
//! ([semantics.md section 17](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#17-amx-complex-tcmmimfp16ps-tcmmrlfp16ps)).
//!
//! Each dword of A and B is a complex number, real part in the low fp16, imaginary part in the
//! high one. Both instructions are TDPFP16PS's two-lane formula (section 11) with other pairs:
//!
//! | | even lane | odd lane |
//! |---|---|---|
//! | TCMMIMFP16PS (imaginary part) | `A.im * B.re` | `A.re * B.im` |
//! | TCMMRLFP16PS (real part) | `A.re * B.re` | `(-A.im) * B.im` |
//!
//! so each is TDPFP16PS on a copy of A whose halves are swapped (TCMMIMFP16PS) or whose high
//! half has its sign flipped (TCMMRLFP16PS), and runs on whichever fp16 kernel the CPU has.

use super::{dot_fp16, get_dword, set_dword, DWORDS, ROWS};

/// Which part of the complex product an instruction accumulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// TCMMIMFP16PS.
    Imaginary,
    /// TCMMRLFP16PS.
    Real,
}

/// A copy of tile `a` whose dwords are rearranged so that TDPFP16PS's even and odd lanes
/// compute `part` (see the module docs). A NaN in the negated half has its sign flipped like
/// any other value: the reference negates the element, not the product.
fn rearranged(a: &[u8; 1024], part: Part) -> [u8; 1024] {
    let mut out = [0u8; 1024];
    for r in 0..ROWS {
        for d in 0..DWORDS {
            let x = get_dword(a, r, d);
            let y = match part {
                Part::Imaginary => x.rotate_left(16),
                Part::Real => x ^ 0x8000_0000,
            };
            set_dword(&mut out, r, d, y);
        }
    }
    out
}

/// `C[m][n]` for `m < m_rows`, `n < n_dwords` over `k_dwords` steps: the `part` of
/// `sum_k A[m][k] * B[k][n]` accumulated into C by the TDPFP16PS formula.
pub(crate) fn dot(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    part: Part,
) {
    dot_fp16(c, &rearranged(a, part), b, m_rows, n_dwords, k_dwords);
}

#[cfg(test)]
mod tests {
    use super::super::exact::{add32, fma32};
    use super::super::fp16_to_f32_bits;
    use super::*;

    /// One output of each instruction written out from section 17's table with the exact
    /// model's steps, without the rearrangement the kernel uses.
    fn model(
        c: u32,
        a: &[u8; 1024],
        b: &[u8; 1024],
        (m, n, k): (usize, usize, usize),
        part: Part,
    ) -> u32 {
        let (mut even, mut odd) = (0u32, 0u32);
        for kk in 0..k {
            let (x, y) = (get_dword(a, m, kk), get_dword(b, kk, n));
            let (are, aim) = (
                fp16_to_f32_bits(x as u16),
                fp16_to_f32_bits((x >> 16) as u16),
            );
            let (bre, bim) = (
                fp16_to_f32_bits(y as u16),
                fp16_to_f32_bits((y >> 16) as u16),
            );
            match part {
                Part::Imaginary => {
                    even = fma32(aim, bre, even);
                    odd = fma32(are, bim, odd);
                }
                Part::Real => {
                    even = fma32(are, bre, even);
                    odd = fma32(aim ^ 0x8000_0000, bim, odd);
                }
            }
        }
        add32(c, add32(even, odd))
    }

    fn tile(seed: &mut u64, special: bool) -> [u8; 1024] {
        core::array::from_fn(|i| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            let x = *seed as u8;
            // High bytes of fp16 values near 1 (0x3A..0x3F), or anything (NaNs, denormals).
            match (special, i % 2) {
                (false, 1) => 0x38 | (x & 0x87),
                _ => x,
            }
        })
    }

    #[test]
    fn both_parts_match_the_formula() {
        let mut seed = 0x1234_5678_9ABC_DEF1u64;
        for round in 0..16 {
            let special = round % 2 == 1;
            let (a, b, c) = (
                tile(&mut seed, special),
                tile(&mut seed, special),
                tile(&mut seed, true),
            );
            let k = 1 + round % 16;
            for part in [Part::Imaginary, Part::Real] {
                let mut got = c;
                dot(&mut got, &a, &b, (16, 16, k), part);
                for m in 0..16 {
                    for n in 0..16 {
                        let want = model(get_dword(&c, m, n), &a, &b, (m, n, k), part);
                        assert_eq!(get_dword(&got, m, n), want, "{part:?} k={k} at {m},{n}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_complex_product() {
        // (1 + 2i) * (3 + 4i) = -5 + 10i, in one dword each.
        let h = |x: f32| u32::from(half::f16::from_f32(x).to_bits());
        let (mut a, mut b) = ([0u8; 1024], [0u8; 1024]);
        set_dword(&mut a, 0, 0, h(1.0) | h(2.0) << 16);
        set_dword(&mut b, 0, 0, h(3.0) | h(4.0) << 16);
        let mut re = [0u8; 1024];
        let mut im = [0u8; 1024];
        dot(&mut re, &a, &b, (1, 1, 1), Part::Real);
        dot(&mut im, &a, &b, (1, 1, 1), Part::Imaginary);
        assert_eq!(f32::from_bits(get_dword(&re, 0, 0)), -5.0);
        assert_eq!(f32::from_bits(get_dword(&im, 0, 0)), 10.0);
    }
}
