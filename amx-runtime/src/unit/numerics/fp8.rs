//! The AMX-FP8 dot products (TDPBF8PS, TDPBHF8PS, TDPHBF8PS, TDPHF8PS)
//! ([semantics.md section 16](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#16-amx-fp8-tdpbf8ps-tdpbhf8ps-tdphbf8ps-tdphf8ps)).
//!
//! Each dword of A and B holds four FP8 values. For every output, per k: the four products
//! (exact in fp32), the even pair `p0 + p1` and the odd pair `p2 + p3` each rounded once, each
//! added to its lane (`add32`), and at the end `C + (even + odd)`:
//!
//! ```text
//! even := +0 ; odd := +0
//! for k in 0..K:
//!     p[i] := fp32(A[m].fp8[4k+i]) * fp32(B[k].fp8[4n+i])      (exact)
//!     even := add32(even, add32(p[0], p[1]))
//!     odd  := add32(odd,  add32(p[2], p[3]))
//! C[m][n] := add32(C[m][n], add32(even, odd))
//! ```
//!
//! [`element`] is that formula on the exact model's steps; [`dot`] runs it in host `f32`
//! arithmetic, which gives the same bits for every output that is not a NaN: the products are
//! exact, and every sum of them is either zero or at least 2^-32 in magnitude, so no step can
//! produce a value the FTZ rule (10.7) would flush, and a denormal C is the only input DAZ
//! changes. Outputs that end in a NaN are recomputed by [`element`], whose NaN choice follows
//! section 10.2.

use super::exact::{add32, fma32};
use super::{clamp, daz, get_dword, is_nan, set_dword, SIGN};
use crate::fp8::{bf8_to_f32_bits, hf8_to_f32_bits};

/// An operand's FP8 format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fp8 {
    /// E5M2.
    Bf8,
    /// E4M3.
    Hf8,
}

impl Fp8 {
    #[inline(always)]
    fn to_f32_bits(self, x: u8) -> u32 {
        match self {
            Fp8::Bf8 => bf8_to_f32_bits(x),
            Fp8::Hf8 => hf8_to_f32_bits(x),
        }
    }
}

/// `x * y` as `fma32` computes it with a `-0` addend: the product alone, rounded once (exact
/// for FP8 inputs), with its own sign when it is zero.
#[inline]
fn mul32(x: u32, y: u32) -> u32 {
    fma32(x, y, SIGN)
}

/// One output element by the formula of the module docs, on the exact model: C element `c`,
/// row `m` of A, column `n` of B, `k` steps, A in `fa`, B in `fb`.
pub(crate) fn element(
    c: u32,
    (a, fa): (&[u8; 1024], Fp8),
    (b, fb): (&[u8; 1024], Fp8),
    m: usize,
    n: usize,
    k: usize,
) -> u32 {
    let (mut even, mut odd) = (0u32, 0u32);
    for kk in 0..k {
        let (x, y) = (
            get_dword(a, m, kk).to_le_bytes(),
            get_dword(b, kk, n).to_le_bytes(),
        );
        let p: [u32; 4] =
            core::array::from_fn(|i| mul32(fa.to_f32_bits(x[i]), fb.to_f32_bits(y[i])));
        even = add32(even, add32(p[0], p[1]));
        odd = add32(odd, add32(p[2], p[3]));
    }
    add32(c, add32(even, odd))
}

/// The dot product: `C[m][n]` for `m < m_rows`, `n < n_dwords` over `k_dwords` steps, A's
/// elements in format `fa`, B's in `fb`. Only those C elements are written; sizes past the
/// tile are clamped.
pub(crate) fn dot(
    c: &mut [u8; 1024],
    (a, fa): (&[u8; 1024], Fp8),
    (b, fb): (&[u8; 1024], Fp8),
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
) {
    let (m_rows, n_dwords, k_dwords) = clamp(m_rows, n_dwords, k_dwords);
    // The host arithmetic below sets MXCSR's sticky flags, which the instruction never does.
    #[cfg(target_arch = "x86_64")]
    let mxcsr = super::read_mxcsr();
    // Each operand converted once: A as 16 rows of 64 values; B transposed so that the values
    // one step multiplies into the 16 columns are contiguous (`bt[k][i][n]` is element `i` of
    // dword `n` of row `k`), which is what lets the sums below run 16 columns per vector.
    let aw: [[f32; 64]; 16] = core::array::from_fn(|r| {
        core::array::from_fn(|i| f32::from_bits(fa.to_f32_bits(a[r * 64 + i])))
    });
    let bt: [[[f32; 16]; 4]; 16] = core::array::from_fn(|k| {
        core::array::from_fn(|i| {
            core::array::from_fn(|n| f32::from_bits(fb.to_f32_bits(b[k * 64 + 4 * n + i])))
        })
    });
    let mut sums = [[0f32; 16]; 16];
    sums_on(super::float_path(), &aw, &bt, (m_rows, k_dwords), &mut sums);
    for (m, row) in sums.iter().enumerate().take(m_rows) {
        for (n, &sum) in row.iter().enumerate().take(n_dwords) {
            let old = get_dword(c, m, n);
            let r = (f32::from_bits(daz(old)) + sum).to_bits();
            let r = if is_nan(r) {
                element(old, (a, fa), (b, fb), m, n, k_dwords)
            } else {
                r
            };
            set_dword(c, m, n, r);
        }
    }
    #[cfg(target_arch = "x86_64")]
    super::write_mxcsr(mxcsr);
}

/// `sums[m][n] = even + odd` of the module docs for rows `m < m_rows` and all 16 columns
/// (columns past the product's are computed and not used), each column in its own vector lane:
/// the same operations in the same order as the formula, one output per lane.
#[inline(always)]
fn sums(
    aw: &[[f32; 64]; 16],
    bt: &[[[f32; 16]; 4]; 16],
    (m_rows, k_dwords): (usize, usize),
    out: &mut [[f32; 16]; 16],
) {
    for (arow, out) in aw.iter().zip(out.iter_mut()).take(m_rows) {
        let (mut even, mut odd) = ([0f32; 16], [0f32; 16]);
        for (x, y) in arow.chunks_exact(4).zip(bt).take(k_dwords) {
            for n in 0..16 {
                even[n] += x[0] * y[0][n] + x[1] * y[1][n];
                odd[n] += x[2] * y[2][n] + x[3] * y[3][n];
            }
        }
        for n in 0..16 {
            out[n] = even[n] + odd[n];
        }
    }
}

/// [`sums`] compiled for the vectors of `path` (the floating-point products' kernel choice,
/// so that `AMX_EMULATOR_KERNELS` caps it as it caps the others). No width fuses a multiply
/// with an add, so every width gives the same bits.
fn sums_on(
    path: super::KernelPath,
    aw: &[[f32; 64]; 16],
    bt: &[[[f32; 16]; 4]; 16],
    shape: (usize, usize),
    out: &mut [[f32; 16]; 16],
) {
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn wide(
        aw: &[[f32; 64]; 16],
        bt: &[[[f32; 16]; 4]; 16],
        shape: (usize, usize),
        out: &mut [[f32; 16]; 16],
    ) {
        sums(aw, bt, shape, out)
    }
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn narrow(
        aw: &[[f32; 64]; 16],
        bt: &[[[f32; 16]; 4]; 16],
        shape: (usize, usize),
        out: &mut [[f32; 16]; 16],
    ) {
        sums(aw, bt, shape, out)
    }
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the floating-point path is AVX-512 only where the CPU has AVX-512F.
        super::KernelPath::Avx512 => unsafe { wide(aw, bt, shape, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the floating-point path is AVX2 only where the CPU has AVX2.
        super::KernelPath::Avx2 => unsafe { narrow(aw, bt, shape, out) },
        _ => sums(aw, bt, shape, out),
    }
}

#[cfg(test)]
mod tests {
    //! The formula against a model of its own: FP8 decoded from its definition into `f64`,
    //! sums in `f64` rounded to `f32` (a sum of two `f32`s rounded to binary64 and then to
    //! binary32 is correctly rounded), the flush rule by scaling, and the NaN rules as a
    //! separate case analysis. Nothing here shares code with the exact model.

    use super::*;

    /// A value of the model: a finite number, an infinity, or a NaN's fp32 bits.
    #[derive(Clone, Copy, Debug)]
    enum V {
        Num(f64),
        Inf(bool),
        NaN(u32),
    }

    /// An FP8 encoding from the format's definition.
    fn decode(x: u8, f: Fp8) -> V {
        let neg = x & 0x80 != 0;
        let s = if neg { -1.0 } else { 1.0 };
        let (eb, mb, bias) = match f {
            Fp8::Bf8 => (5, 2, 15),
            Fp8::Hf8 => (4, 3, 7),
        };
        let e = i32::from(x & 0x7F) >> mb;
        let m = i32::from(x) & ((1 << mb) - 1);
        let top = (1 << eb) - 1;
        let sign = u32::from(neg) << 31;
        match f {
            Fp8::Bf8 if e == top && m == 0 => return V::Inf(neg),
            // The fraction at the top of the fp32 fraction, as section 16 writes it.
            Fp8::Bf8 if e == top => return V::NaN(sign | 0x7F80_0000 | (m as u32) << 21),
            Fp8::Hf8 if e == top && m == 7 => return V::NaN(sign | 0x7F80_0000 | 7 << 20),
            _ => {}
        }
        let frac = f64::from(m) / f64::from(1 << mb);
        V::Num(if e == 0 {
            s * frac * 2f64.powi(1 - bias)
        } else {
            s * (1.0 + frac) * 2f64.powi(e - bias)
        })
    }

    fn quiet(bits: u32) -> V {
        V::NaN(bits | 0x0040_0000)
    }

    const DEFAULT_NAN: u32 = 0xFFC0_0000;

    /// `v` rounded to binary32 with an unbounded exponent, flushed when below 2^-126.
    fn round(v: f64) -> V {
        if v == 0.0 {
            return V::Num(v);
        }
        // Scaling by 2^200 keeps every binary32 rounding boundary of this range in the normal
        // range, so the conversion rounds at 24 bits whatever the exponent.
        let scaled = (v * 2f64.powi(200)) as f32;
        if scaled.is_infinite() {
            return V::Num(f64::from(v as f32));
        }
        let r = f64::from(scaled) * 2f64.powi(-200);
        if r.abs() < 2f64.powi(-126) {
            return V::Num(if v < 0.0 { -0.0 } else { 0.0 });
        }
        V::Num(f64::from(r as f32))
    }

    /// A binary32 value after DAZ.
    fn input(bits: u32) -> V {
        let x = f32::from_bits(bits);
        if x.is_nan() {
            V::NaN(bits)
        } else if x.is_infinite() {
            V::Inf(x < 0.0)
        } else if x.is_subnormal() {
            V::Num(if x < 0.0 { -0.0 } else { 0.0 })
        } else {
            V::Num(f64::from(x))
        }
    }

    fn mul(x: V, y: V) -> V {
        match (x, y) {
            (V::NaN(a), _) | (_, V::NaN(a)) => quiet(a),
            (V::Inf(_), V::Num(z)) | (V::Num(z), V::Inf(_)) if z == 0.0 => V::NaN(DEFAULT_NAN),
            (V::Inf(a), V::Inf(b)) => V::Inf(a != b),
            (V::Inf(a), V::Num(z)) | (V::Num(z), V::Inf(a)) => V::Inf(a != (z < 0.0)),
            (V::Num(a), V::Num(b)) => V::Num(a * b), // exact: at most 8 significant bits
        }
    }

    fn add(x: V, y: V) -> V {
        match (x, y) {
            (V::NaN(a), _) | (_, V::NaN(a)) => quiet(a),
            (V::Inf(a), V::Inf(b)) if a != b => V::NaN(DEFAULT_NAN),
            (V::Inf(a), _) | (_, V::Inf(a)) => V::Inf(a),
            (V::Num(a), V::Num(b)) => {
                if a == 0.0 && b == 0.0 {
                    // -0 only if both are -0.
                    V::Num(if a.is_sign_negative() && b.is_sign_negative() {
                        -0.0
                    } else {
                        0.0
                    })
                } else if a + b == 0.0 {
                    V::Num(0.0)
                } else {
                    // Both are binary32 values: the binary64 sum, rounded again, is exact here.
                    round(a + b)
                }
            }
        }
    }

    fn bits(v: V) -> u32 {
        match v {
            V::Num(x) => (x as f32).to_bits(),
            V::Inf(neg) => (u32::from(neg) << 31) | 0x7F80_0000,
            V::NaN(b) => b,
        }
    }

    fn model(
        c: u32,
        a: &[u8; 1024],
        b: &[u8; 1024],
        (m, n, k): (usize, usize, usize),
        f: (Fp8, Fp8),
    ) -> u32 {
        let (mut even, mut odd) = (V::Num(0.0), V::Num(0.0));
        for kk in 0..k {
            let p: Vec<V> = (0..4)
                .map(|i| {
                    mul(
                        decode(a[m * 64 + 4 * kk + i], f.0),
                        decode(b[kk * 64 + 4 * n + i], f.1),
                    )
                })
                .collect();
            even = add(even, add(p[0], p[1]));
            odd = add(odd, add(p[2], p[3]));
        }
        bits(add(input(c), add(even, odd)))
    }

    /// A small deterministic generator (xorshift), so a failure reproduces.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn byte(&mut self) -> u8 {
            self.next() as u8
        }
    }

    /// A tile of FP8 bytes of one class: any encoding; no NaN/infinity encodings (so that the
    /// sums, not the specials, decide); or tiny values only (denormals and the smallest normals).
    fn tile(rng: &mut Rng, class: u32) -> [u8; 1024] {
        core::array::from_fn(|_| {
            let x = rng.byte();
            match class {
                0 => x,
                1 => x & 0xF7, // clears the top exponent bit's neighbour: no 0x7C..0x7F, 0xFC..
                _ => x & 0x87,
            }
        })
    }

    /// C values: ordinary, huge, denormal, signed zeros, NaNs and infinities.
    fn c_tile(rng: &mut Rng) -> [u8; 1024] {
        let mut c = [0u8; 1024];
        for i in 0..256 {
            let v: u32 = match rng.next() % 8 {
                0 => 0x8000_0000,
                1 => 0,
                2 => rng.next() as u32 & 0x807F_FFFF, // denormal
                3 => 0x7F80_0000 | (rng.next() as u32 & 0x8000_0000),
                4 => 0x7F80_0001 | (rng.next() as u32 & 0x80FF_FFFF), // NaN, maybe signalling
                5 => 0x7F00_0000 | (rng.next() as u32 & 0x80FF_FFFF), // near the top
                _ => (rng.next() as u32 & 0x83FF_FFFF) | 0x3C00_0000,
            };
            c[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        c
    }

    const FORMATS: [(Fp8, Fp8); 4] = [
        (Fp8::Bf8, Fp8::Bf8),
        (Fp8::Bf8, Fp8::Hf8),
        (Fp8::Hf8, Fp8::Bf8),
        (Fp8::Hf8, Fp8::Hf8),
    ];

    #[test]
    fn formula_matches_an_independent_model() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..24 {
            let f = FORMATS[round % 4];
            let (a, b, c) = (
                tile(&mut rng, round as u32 % 3),
                tile(&mut rng, (round as u32 / 3) % 3),
                c_tile(&mut rng),
            );
            let k = 1 + round % 16;
            for m in 0..16 {
                for n in 0..16 {
                    let old = get_dword(&c, m, n);
                    let want = model(old, &a, &b, (m, n, k), f);
                    let got = element(old, (&a, f.0), (&b, f.1), m, n, k);
                    assert_eq!(
                        got, want,
                        "{f:?} k={k} m={m} n={n} C={old:#x}: {got:#x} != {want:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn host_arithmetic_matches_the_formula() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        for round in 0..48 {
            let f = FORMATS[round % 4];
            let (a, b, c) = (
                tile(&mut rng, round as u32 % 3),
                tile(&mut rng, (round as u32 / 4) % 3),
                c_tile(&mut rng),
            );
            let (m, n, k) = (1 + round % 16, 1 + (round * 7) % 16, 1 + (round * 5) % 16);
            let mut got = c;
            dot(&mut got, (&a, f.0), (&b, f.1), (m, n, k));
            for r in 0..16 {
                for col in 0..16 {
                    let old = get_dword(&c, r, col);
                    let want = if r < m && col < n {
                        element(old, (&a, f.0), (&b, f.1), r, col, k)
                    } else {
                        old
                    };
                    assert_eq!(
                        get_dword(&got, r, col),
                        want,
                        "{f:?} {m}x{n}x{k} at {r},{col}"
                    );
                }
            }
        }
    }

    /// Directed cases of section 16, one statement each.
    #[test]
    fn directed_cases() {
        let one = |a: [u8; 4], b: [u8; 4], c: u32, f: (Fp8, Fp8)| {
            let (mut at, mut bt, mut ct) = ([0u8; 1024], [0u8; 1024], [0u8; 1024]);
            at[..4].copy_from_slice(&a);
            bt[..4].copy_from_slice(&b);
            set_dword(&mut ct, 0, 0, c);
            let want = element(c, (&at, f.0), (&bt, f.1), 0, 0, 1);
            dot(&mut ct, (&at, f.0), (&bt, f.1), (1, 1, 1));
            assert_eq!(get_dword(&ct, 0, 0), want);
            want
        };
        let hh = (Fp8::Hf8, Fp8::Hf8);
        let bb = (Fp8::Bf8, Fp8::Bf8);
        // 1 * 1 in each of the four slots, and C = 1: 5.
        assert_eq!(
            one([0x38; 4], [0x38; 4], 1f32.to_bits(), hh),
            5f32.to_bits()
        );
        // HF8 denormals are honoured: 2^-9 * 2^-9 = 2^-18.
        assert_eq!(
            one([1, 0, 0, 0], [1, 0, 0, 0], 0, hh),
            2f32.powi(-18).to_bits()
        );
        // BF8 denormals too: 2^-16 * 2^-16 = 2^-32.
        assert_eq!(
            one([1, 0, 0, 0], [1, 0, 0, 0], 0, bb),
            2f32.powi(-32).to_bits()
        );
        // A denormal C is read as zero.
        assert_eq!(one([0; 4], [0; 4], 1, hh), 0);
        // -0 (a flushed negative C) plus the +0 lanes is +0 (10.6).
        assert_eq!(one([0; 4], [0; 4], 0x8000_0001, hh), 0);
        // The pairs round before the lanes: 448*448 + 2^-18 loses the small product in its pair.
        let big = 448f32 * 448.0;
        assert_eq!(one([0x7E, 1, 0, 0], [0x7E, 1, 0, 0], 0, hh), big.to_bits());
        // inf * 0 is the default NaN; a BF8 NaN wins over a later infinity.
        assert_eq!(one([0x7C, 0, 0, 0], [0, 0, 0, 0], 0, bb), 0xFFC0_0000);
        assert_eq!(
            one([0x7D, 0x7C, 0, 0], [0x38, 0x3C, 0, 0], 0, bb),
            0x7FE0_0000
        );
        // The even lane's NaN beats the odd lane's; C's NaN beats both.
        assert_eq!(one([0, 0, 0x7F, 0], [0, 0, 0x38, 0], 0, hh), 0x7FF0_0000);
        assert_eq!(
            one([0xFF, 0, 0x7F, 0], [0x38, 0, 0x38, 0], 0, hh),
            0xFFF0_0000
        );
        assert_eq!(
            one([0xFF, 0, 0, 0], [0x38, 0, 0, 0], 0x7F80_0001, hh),
            0x7FC0_0001
        );
        // Zero signs: -0 products give +0 lanes (they start at +0), so C = -0 becomes +0.
        assert_eq!(one([0x80, 0x80, 0x80, 0x80], [0x38; 4], 0x8000_0000, hh), 0);
    }
}
