//! The activations of the fused epilogue (step 5 of [`epilogue`](crate::epilogue)), in `f32`,
//! the same bits on every vector width, backend and CPU.
//!
//! GELU (both forms) and SiLU are `x * g(x)` with a gate `g` that rises from 0 to 1 and
//! satisfies `g(-x) = 1 - g(x)`: the normal CDF, or a sigmoid. The gate of `|x|` is a table of
//! 16 polynomials of degree 5 (a [`Gate`]):
//!
//! ```text
//! y = min(|x| * scale, 15)      n = y rounded to an integer (half to even)      t = y - n
//! h = c5[n] t^5 + ... + c0[n]   (Horner, fused multiply-adds)
//! g = h for x >= 0, 1 - h for x < 0        act(x) = max(x, f32::MIN) * g
//! ```
//!
//! Each step is one correctly rounded `f32` operation, so the scalar function, the AVX2
//! kernel and the AVX-512 kernel give the same bits. The vector kernels fetch the coefficients
//! with one register permute per coefficient (the 16 entries of a coefficient fill one 512-bit
//! register, or two 256-bit ones): about 21 vector instructions per 16 values and no division.
//! The textbook forms, `x / (1 + exp(-2u))` and the like, need a `vdivps`, which keeps a
//! 512-bit divider busy for about 10 cycles, on top of an exponential; measured in one process
//! on an AVX-512 core, they took 1.2-1.8x as long (BENCHMARKS.md).
//!
//! Polynomial 15 is exactly 1, so large inputs are exact: `act(x) = x` and `act(-x) = -0` for
//! `|x|` past `14.5 / scale`, and `act(-inf) = -0` (the clamp to `f32::MIN` keeps `-inf * 0`
//! from making a NaN). The tables come from `scripts/fit-activations.py` (Chebyshev
//! interpolation in double precision, rounded to `f32`), which also reports the gates' worst
//! errors: below `2^-23.8` for the GELUs and `2^-21.5` for SiLU.

use crate::epilogue::VectorIsa;

/// The activation function of an [`Epilogue`](crate::Epilogue), computed in `f32`.
///
/// The transcendental ones (GELU, SiLU) use this crate's own piecewise polynomials, the same
/// bits on every CPU and backend (see [`activation`](crate::activation)): for every finite
/// `x`, the computed value is within `TOLERANCE * (1 + |x|)` of the exact function
/// ([`Activation::TOLERANCE`]), which the tests check against `f64` over a dense sweep. NaN
/// stays NaN (ReLU gives 0); `+inf` gives `+inf` and `-inf` gives `-0` (0 for ReLU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activation {
    /// `x`.
    #[default]
    Identity,
    /// `max(x, 0)`; NaN gives 0.
    Relu,
    /// GELU, tanh form: `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// GELU, erf form: `0.5 x (1 + erf(x / sqrt(2)))`.
    GeluErf,
    /// SiLU (swish): `x / (1 + exp(-x))`.
    Silu,
}

impl Activation {
    /// The bound on the computed activation: `|act_f32(x) - act(x)| <= TOLERANCE * (1 + |x|)`
    /// for finite `x` (`2^-20`).
    pub const TOLERANCE: f64 = 1.0 / (1u64 << 20) as f64;

    /// The largest slope of the exact function (a Lipschitz constant), which error bounds
    /// propagate an input error through: 1 for identity and ReLU, 1.13 for GELU, 1.1 for SiLU.
    pub const fn lipschitz(self) -> f64 {
        match self {
            Activation::Identity | Activation::Relu => 1.0,
            Activation::GeluTanh | Activation::GeluErf => 1.13,
            Activation::Silu => 1.1,
        }
    }

    /// The function as the epilogue computes it (step 5 of the
    /// [epilogue's docs](crate::epilogue)).
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Identity => x,
            Activation::Relu => relu(x),
            Activation::GeluTanh => GELU_TANH.apply(x),
            Activation::GeluErf => GELU_ERF.apply(x),
            Activation::Silu => SILU.apply(x),
        }
    }

    /// [`Activation::apply`] on every value of `x`, in place, with the widest vectors the CPU
    /// has (AVX-512, AVX2 or the baseline): the same bits as `apply` one value at a time, and
    /// what the fused epilogue runs. For an activation outside a fused layer, or a reference.
    ///
    /// ```
    /// use amx_gemm::Activation;
    ///
    /// let mut x = [-3.0f32, -0.5, 0.0, 0.5, 3.0, f32::NAN];
    /// Activation::GeluTanh.apply_slice(&mut x);
    /// assert_eq!(x[4], Activation::GeluTanh.apply(3.0));
    /// assert!((x[3] - 0.345_714).abs() < 1e-5 && x[5].is_nan());
    /// ```
    pub fn apply_slice(self, x: &mut [f32]) {
        activate(VectorIsa::detect(), self, x);
    }

    /// The exact function in `f64` (erf and tanh to about 1e-15), for references.
    pub fn exact(self, x: f64) -> f64 {
        match self {
            Activation::Identity => x,
            Activation::Relu => {
                if x > 0.0 {
                    x
                } else {
                    0.0
                }
            }
            Activation::GeluTanh => {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                0.5 * x * (1.0 + u.tanh())
            }
            Activation::GeluErf => 0.5 * x * (1.0 + erf_f64(x / std::f64::consts::SQRT_2)),
            Activation::Silu => x / (1.0 + (-x).exp()),
        }
    }
}

/// Applies `activation` to every value of `x`, with the kernels of `isa` (the same bits as
/// [`Activation::apply`] on each value).
pub(crate) fn activate(isa: VectorIsa, activation: Activation, x: &mut [f32]) {
    match activation {
        Activation::Identity => {}
        Activation::Relu => relu_all(isa, x),
        Activation::GeluTanh => GELU_TANH.apply_all(isa, x),
        Activation::GeluErf => GELU_ERF.apply_all(isa, x),
        Activation::Silu => SILU.apply_all(isa, x),
    }
}

#[inline(always)]
fn relu(x: f32) -> f32 {
    if x > 0.0 {
        x
    } else {
        0.0
    }
}

/// ReLU over a slice. `maxps(x, 0)` is `x > 0 ? x : 0`, [`relu`] exactly (NaN and -0 give
/// +0). Written with the intrinsics because the compiler, left to vectorize `relu`, stores the
/// zeros with masked stores, and the next stage's loads cannot take their data from a masked
/// store before it reaches the cache: in a fused layer that made ReLU cost more than GELU.
fn relu_all(isa: VectorIsa, x: &mut [f32]) {
    /// # Safety
    /// The CPU supports AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn wide(x: &mut [f32]) {
        use std::arch::x86_64::*;
        let (chunks, rest) = x.as_chunks_mut::<16>();
        for v in chunks {
            // SAFETY: `v` is 16 f32, read and written unaligned.
            unsafe {
                let y = _mm512_max_ps(_mm512_loadu_ps(v.as_ptr()), _mm512_setzero_ps());
                _mm512_storeu_ps(v.as_mut_ptr(), y);
            }
        }
        rest.iter_mut().for_each(|v| *v = relu(*v));
    }
    /// # Safety
    /// The CPU supports AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn narrow(x: &mut [f32]) {
        use std::arch::x86_64::*;
        let (chunks, rest) = x.as_chunks_mut::<8>();
        for v in chunks {
            // SAFETY: `v` is 8 f32, read and written unaligned.
            unsafe {
                let y = _mm256_max_ps(_mm256_loadu_ps(v.as_ptr()), _mm256_setzero_ps());
                _mm256_storeu_ps(v.as_mut_ptr(), y);
            }
        }
        rest.iter_mut().for_each(|v| *v = relu(*v));
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports AVX-512F (`supported` checked it).
        VectorIsa::Avx512 if isa.supported() => unsafe { wide(x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports AVX2 (`supported` checked it).
        VectorIsa::Avx2 if isa.supported() => unsafe { narrow(x) },
        _ => x.iter_mut().for_each(|v| *v = relu(*v)),
    }
}

/// Degree of the gates' polynomials.
const DEGREE: usize = 5;
/// Coefficients per polynomial.
const TERMS: usize = DEGREE + 1;
/// Polynomials per gate: one 512-bit register of `f32` per coefficient.
const INTERVALS: usize = 16;
/// The largest `y`: polynomial 15 covers `y` in `[14.5, 15]`, everything beyond is clamped.
const TOP: f32 = (INTERVALS - 1) as f32;
/// `1.5 * 2^23`: for `0 <= y <= 15`, `y + MAGIC` rounds `y` to an integer `n` (half to even),
/// held in the low bits of the sum's encoding (MAGIC's low 22 bits are 0).
const MAGIC: f32 = 12_582_912.0;

/// A gate `g` with `g(-x) = 1 - g(x)`, as 16 polynomials in `t` over `|x|` (see the
/// [module docs](self)).
#[derive(Debug)]
struct Gate {
    /// `y = |x| * scale`: polynomial `n` covers `|x|` in `[(n - 0.5) / scale, (n + 0.5) / scale]`.
    scale: f32,
    /// `coeffs[k][n]`: coefficient of `t^k` in polynomial `n`.
    coeffs: [[f32; INTERVALS]; TERMS],
}

/// The `f32` values of the encodings in `b`.
const fn bits(b: [u32; INTERVALS]) -> [f32; INTERVALS] {
    let mut out = [0f32; INTERVALS];
    let mut i = 0;
    while i < INTERVALS {
        out[i] = f32::from_bits(b[i]);
        i += 1;
    }
    out
}

// Made by scripts/fit-activations.py.
/// GELU, tanh form: the sigmoid of `2 sqrt(2 / pi) (x + 0.044715 x^3)`.
const GELU_TANH: Gate = Gate {
    scale: 2.75,
    coeffs: [
        bits([
            0x3f000000, 0x3f2454ec, 0x3f4431c7, 0x3f5cb787, 0x3f6d4c5f, 0x3f7727ee, 0x3f7c4d43,
            0x3f7ea610, 0x3f7f932c, 0x3f7fe308, 0x3f7ff999, 0x3f7ffed9, 0x3f7fffd6, 0x3f7ffffb,
            0x3f800000, 0x3f800000,
        ]),
        bits([
            0x3e148d36, 0x3e0b0191, 0x3de3de8e, 0x3da3c32d, 0x3d4ea150, 0x3ce4dc5e, 0x3c5dcbbf,
            0x3bba9e7b, 0x3b069e22, 0x3a23c506, 0x3924d3ae, 0x38067a96, 0x36ae3c10, 0x352f8fcd,
            0x3386c3d8, 0x00000000,
        ]),
        bits([
            0x24aefc08, 0xbc13a4f4, 0xbc7163dd, 0xbc8195a8, 0xbc5934c5, 0xbc165408, 0xbbaffce2,
            0xbb2f7c7d, 0xba94597d, 0xb9d1e755, 0xb8f424ce, 0xb7e4c5cd, 0xb6a92446, 0xb54147a0,
            0xb3a732e1, 0x00000000,
        ]),
        bits([
            0xbb528fdf, 0xbb2a6148, 0xba951e9c, 0x39b82840, 0x3aa118b3, 0x3ab60db3, 0x3a908282,
            0x3a35cc48, 0x39bb69ce, 0x391eae23, 0x385a12ab, 0x376ee7f8, 0x364c8efb, 0x35062f84,
            0x33843be8, 0x00000000,
        ]),
        bits([
            0x262b2900, 0x39967afe, 0x39d290d5, 0x39a2e681, 0x3901ff95, 0xb7f731b3, 0xb8cc7e76,
            0xb8cccd2f, 0xb88e6d59, 0xb819225e, 0xb781a8b7, 0xb6abb8a9, 0xb5af4493, 0xb4878f59,
            0xb31c2ede, 0x00000000,
        ]),
        bits([
            0x388735df, 0x3839c5b6, 0x35010aca, 0xb809b55d, 0xb81cc7d3, 0xb7bbf9e9, 0xb6baa431,
            0x368cb2f6, 0x36e3d0d4, 0x36b574ef, 0x364b330b, 0x35a8e949, 0x34d179fb, 0x33c04378,
            0x32810997, 0x00000000,
        ]),
    ],
};
/// GELU, erf form: the normal CDF, `(1 + erf(x / sqrt(2))) / 2`.
const GELU_ERF: Gate = Gate {
    scale: 2.75,
    coeffs: [
        bits([
            0x3f000000, 0x3f2455de, 0x3f44376a, 0x3f5cc28c, 0x3f6d5696, 0x3f7729d1, 0x3f7c45b3,
            0x3f7e9a62, 0x3f7f8939, 0x3f7fdd19, 0x3f7ff6f0, 0x3f7ffded, 0x3f7fff95, 0x3f7fffed,
            0x3f7ffffd, 0x3f800000,
        ]),
        bits([
            0x3e148d36, 0x3e0b0c33, 0x3de40fd3, 0x3da3dd3e, 0x3d4e4f21, 0x3ce39349, 0x3c5bf0b2,
            0x3bba3ba9, 0x3b0a28e4, 0x3a3399dd, 0x394c8ded, 0x384c1e3c, 0x3732744a, 0x3608b14e,
            0x34b77868, 0x00000000,
        ]),
        bits([
            0xa54ff201, 0xbc13169b, 0xbc71405b, 0xbc8201ca, 0xbc5a3eb5, 0xbc167701, 0xbbae8040,
            0xbb2c6221, 0xba9226e7, 0xb9d5bb5c, 0xb9073ab2, 0xb8146bda, 0xb70d89b8, 0xb5eadb94,
            0xb4a9b2b1, 0x00000000,
        ]),
        bits([
            0xbb518669, 0xbb2a2ffc, 0xba978892, 0x39afb807, 0x3aa253fe, 0x3ab90829, 0x3a91d109,
            0x3a33e9c5, 0x39b5c957, 0x3919bf21, 0x385c6889, 0x3786f2a1, 0x368de52b, 0x3580988f,
            0x344973ae, 0x00000000,
        ]),
        bits([
            0x262afe55, 0x399392e5, 0x39d0d10e, 0x39a542bf, 0x390886fe, 0xb7f99ed8, 0xb8d69c69,
            0xb8d2b3e6, 0xb88cd8cb, 0xb811fcce, 0xb77608a6, 0xb6ac8776, 0xb5cc1790, 0xb4cd6471,
            0xb3b0e1e8, 0x00000000,
        ]),
        bits([
            0x388434ff, 0x3837a98d, 0x35f370f2, 0xb8041e70, 0xb81fcea7, 0xb7c8515f, 0xb6c0f239,
            0x36a701c2, 0x36f47fd5, 0x36b2f549, 0x363c8576, 0x359c3671, 0x34d36424, 0x33ee439f,
            0x32e26405, 0x00000000,
        ]),
    ],
};
/// SiLU: the sigmoid, `1 / (1 + exp(-x))`.
const SILU: Gate = Gate {
    scale: 0.9375,
    coeffs: [
        bits([
            0x3f000000, 0x3f3e744f, 0x3f64e3d0, 0x3f75f93d, 0x3f7c7559, 0x3f7ec51e, 0x3f7f934a,
            0x3f7fda8c, 0x3f7ff31b, 0x3f7ffb90, 0x3f7ffe79, 0x3f7fff79, 0x3f7fffd2, 0x3f7ffff0,
            0x3f7ffffb, 0x3f800000,
        ]),
        bits([
            0x3e888883, 0x3e500ebc, 0x3dced757, 0x3d246a69, 0x3c6e6dc0, 0x3ba721a3, 0x3ae78853,
            0x3a1fb681, 0x395c0733, 0x38977c72, 0x37d08e7e, 0x370f8e34, 0x36459f6c, 0x35880695,
            0x34bb415b, 0x00000000,
        ]),
        bits([
            0xa5cb1e7a, 0xbd587f3f, 0xbd2deebe, 0xbca1a7a7, 0xbbf7479d, 0xbb308b55, 0xba761ed7,
            0xb9aa2510, 0xb8ea9324, 0xb8218af5, 0xb75e6bf4, 0xb6991a98, 0xb5d2c501, 0xb5111349,
            0xb447b6a1, 0x00000000,
        ]),
        bits([
            0xbccf08da, 0xbbb49c87, 0x3c078603, 0x3bc12108, 0x3b260d7a, 0x3a7643b0, 0x39adde7c,
            0x38f172a2, 0x3826b085, 0x3765b449, 0x369e29cf, 0x35d9c1b2, 0x3515e3cc, 0x344e57f6,
            0x338e074f, 0x00000000,
        ]),
        bits([
            0x270142ab, 0x3bcd1d6c, 0x3a251b18, 0xba83d29a, 0xba1d8091, 0xb97f39a0, 0xb8b966b1,
            0xb801f89f, 0xb7340be2, 0xb67863be, 0xb5ab1866, 0xb4eb97af, 0xb4222ca2, 0xb35f4226,
            0xb299ac0c, 0x00000000,
        ]),
        bits([
            0x3b34a5bc, 0xba3d7acb, 0xba5ab135, 0x37313a7a, 0x38c8631f, 0x384751a9, 0x3799426e,
            0x36dadaef, 0x361886ff, 0x3552de8d, 0x34915b20, 0x33c8333b, 0x3309d2bb, 0x323dbdca,
            0x31829a97, 0x00000000,
        ]),
    ],
};

impl Gate {
    /// `x * g(x)`, the scalar model that the vector kernels reproduce bit for bit.
    #[inline(always)]
    fn apply(&self, x: f32) -> f32 {
        let y = (x.abs() * self.scale).min(TOP);
        let s = y + MAGIC;
        let t = y - (s - MAGIC);
        let n = (s.to_bits() as usize) & (INTERVALS - 1);
        let mut h = self.coeffs[DEGREE][n];
        for k in (0..DEGREE).rev() {
            h = h.mul_add(t, self.coeffs[k][n]);
        }
        let g = if x < 0.0 { 1.0 - h } else { h };
        // `maxps(f32::MIN, x)`: -inf becomes f32::MIN (whose gate is exactly 0), a NaN stays.
        let x = if f32::MIN > x { f32::MIN } else { x };
        x * g
    }

    /// [`Gate::apply`] on every value of `x`, with the kernels of `isa`.
    fn apply_all(&self, isa: VectorIsa, x: &mut [f32]) {
        match isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports AVX-512F (`supported` checked it).
            VectorIsa::Avx512 if isa.supported() => unsafe { self.apply_avx512(x) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports AVX2 and FMA (`supported` checked it).
            VectorIsa::Avx2 if isa.supported() => unsafe { self.apply_avx2(x) },
            _ => x.iter_mut().for_each(|v| *v = self.apply(*v)),
        }
    }

    /// [`Gate::apply`], 16 lanes at a time; each intrinsic is the scalar model's operation of
    /// the same line.
    ///
    /// # Safety
    /// The CPU supports AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn apply_avx512(&self, x: &mut [f32]) {
        use std::arch::x86_64::*;
        let c: [__m512; TERMS] = std::array::from_fn(|k| {
            // SAFETY: a row of coefficients is 16 f32, read unaligned.
            unsafe { _mm512_loadu_ps(self.coeffs[k].as_ptr()) }
        });
        let scale = _mm512_set1_ps(self.scale);
        let top = _mm512_set1_ps(TOP);
        let magic = _mm512_set1_ps(MAGIC);
        let one = _mm512_set1_ps(1.0);
        let lowest = _mm512_set1_ps(f32::MIN);
        let (chunks, rest) = x.as_chunks_mut::<16>();
        for v in chunks {
            // SAFETY: `v` is 16 f32, read and written unaligned.
            let x = unsafe { _mm512_loadu_ps(v.as_ptr()) };
            // minps returns its second operand when the first is NaN: `f32::min`'s 15.
            let y = _mm512_min_ps(_mm512_mul_ps(_mm512_abs_ps(x), scale), top);
            let s = _mm512_add_ps(y, magic);
            let t = _mm512_sub_ps(y, _mm512_sub_ps(s, magic));
            // vpermps reads the low 4 bits of each index: n.
            let n = _mm512_castps_si512(s);
            let mut h = _mm512_permutexvar_ps(n, c[DEGREE]);
            for ck in c[..DEGREE].iter().rev() {
                h = _mm512_fmadd_ps(h, t, _mm512_permutexvar_ps(n, *ck));
            }
            let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
            let g = _mm512_mask_sub_ps(h, negative, one, h);
            let x = _mm512_max_ps(lowest, x);
            // SAFETY: as above.
            unsafe { _mm512_storeu_ps(v.as_mut_ptr(), _mm512_mul_ps(x, g)) };
        }
        rest.iter_mut().for_each(|v| *v = self.apply(*v));
    }

    /// [`Gate::apply`], 8 lanes at a time: each coefficient is picked from its two halves by
    /// bit 3 of `n`.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply_avx2(&self, x: &mut [f32]) {
        use std::arch::x86_64::*;
        let half = |k: usize, at: usize| {
            // SAFETY: 8 of the 16 f32 of a row of coefficients, read unaligned.
            unsafe { _mm256_loadu_ps(self.coeffs[k][at..at + 8].as_ptr()) }
        };
        let lo: [__m256; TERMS] = std::array::from_fn(|k| half(k, 0));
        let hi: [__m256; TERMS] = std::array::from_fn(|k| half(k, 8));
        let scale = _mm256_set1_ps(self.scale);
        let top = _mm256_set1_ps(TOP);
        let magic = _mm256_set1_ps(MAGIC);
        let one = _mm256_set1_ps(1.0);
        let lowest = _mm256_set1_ps(f32::MIN);
        let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        let (chunks, rest) = x.as_chunks_mut::<8>();
        for v in chunks {
            // SAFETY: `v` is 8 f32, read and written unaligned.
            let x = unsafe { _mm256_loadu_ps(v.as_ptr()) };
            let y = _mm256_min_ps(_mm256_mul_ps(_mm256_and_ps(x, magnitude), scale), top);
            let s = _mm256_add_ps(y, magic);
            let t = _mm256_sub_ps(y, _mm256_sub_ps(s, magic));
            let n = _mm256_castps_si256(s);
            // Bit 3 of n moved to the sign bit, which blendv reads.
            let upper = _mm256_castsi256_ps(_mm256_slli_epi32::<28>(n));
            let coeff = |k: usize| {
                _mm256_blendv_ps(
                    _mm256_permutevar8x32_ps(lo[k], n),
                    _mm256_permutevar8x32_ps(hi[k], n),
                    upper,
                )
            };
            let mut h = coeff(DEGREE);
            for k in (0..DEGREE).rev() {
                h = _mm256_fmadd_ps(h, t, coeff(k));
            }
            let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
            let g = _mm256_blendv_ps(h, _mm256_sub_ps(one, h), negative);
            let x = _mm256_max_ps(lowest, x);
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(v.as_mut_ptr(), _mm256_mul_ps(x, g)) };
        }
        rest.iter_mut().for_each(|v| *v = self.apply(*v));
    }
}

/// `erf` in `f64` to about 1e-15: `2/sqrt(pi) e^(-x^2) sum 2^j x^(2j+1) / (1 3 5 .. (2j+1))`,
/// a series of positive terms (no cancellation); 1 beyond 6.
fn erf_f64(x: f64) -> f64 {
    let z = x.abs();
    if z.is_nan() {
        return x;
    }
    if z > 6.0 {
        return 1f64.copysign(x);
    }
    let mut term = z;
    let mut sum = z;
    let mut j = 0.0;
    while term > sum * 1e-17 {
        j += 1.0;
        term *= 2.0 * z * z / (2.0 * j + 1.0);
        sum += term;
    }
    let y = 2.0 / std::f64::consts::PI.sqrt() * (-z * z).exp() * sum;
    y.min(1.0).copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_are_within_their_bound() {
        let acts = [
            Activation::Relu,
            Activation::GeluTanh,
            Activation::GeluErf,
            Activation::Silu,
        ];
        let mut worst = [0f64; 4];
        let mut x = -40.0f32;
        let mut check = |x: f32| {
            for (w, a) in worst.iter_mut().zip(acts) {
                let got = f64::from(a.apply(x));
                let want = a.exact(f64::from(x));
                let err = (got - want).abs() / (1.0 + f64::from(x).abs());
                assert!(
                    err <= Activation::TOLERANCE,
                    "{a:?}({x}) = {got}, exact {want}"
                );
                *w = w.max(err);
            }
        };
        while x < 40.0 {
            check(x);
            x += 1.0 / 1024.0;
        }
        for e in -30..39 {
            for m in [1.0f32, 1.37, 1.9999] {
                check(m * 2f32.powi(e));
                check(-m * 2f32.powi(e));
            }
        }
        check(f32::MAX);
        check(f32::MIN);
        // The bound is not slack by orders of magnitude for the transcendental ones.
        assert!(worst[1] > Activation::TOLERANCE / 64.0, "{worst:?}");
        for a in acts {
            assert!(a.apply(f32::NAN).is_nan() || a == Activation::Relu);
        }
    }

    #[test]
    fn erf_reference_is_accurate() {
        // Known values of erf.
        for (x, e) in [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
        ] {
            assert!((erf_f64(x) - e).abs() < 4e-15, "{x}");
            assert!((erf_f64(-x) + e).abs() < 4e-15, "{x}");
        }
    }

    /// Past the last interval the gates are exactly 0 and 1, so large inputs are exact and the
    /// infinities and NaN come out as documented.
    #[test]
    fn large_inputs_are_exact() {
        for (a, gate) in [
            (Activation::GeluTanh, &GELU_TANH),
            (Activation::GeluErf, &GELU_ERF),
            (Activation::Silu, &SILU),
        ] {
            let mut x = 14.5 / gate.scale * (1.0 + f32::EPSILON);
            while x < f32::MAX / 2.0 {
                assert_eq!(a.apply(x).to_bits(), x.to_bits(), "{a:?}({x})");
                assert_eq!(a.apply(-x).to_bits(), (-0f32).to_bits(), "{a:?}({})", -x);
                x *= 1.37;
            }
            assert_eq!(a.apply(f32::MAX), f32::MAX);
            assert_eq!(a.apply(f32::INFINITY), f32::INFINITY);
            assert_eq!(a.apply(f32::NEG_INFINITY).to_bits(), (-0f32).to_bits());
            assert_eq!(a.apply(-0.0).to_bits(), (-0f32).to_bits());
            assert_eq!(a.apply(0.0).to_bits(), 0f32.to_bits());
            assert!(a.apply(f32::NAN).is_nan() && a.apply(-f32::NAN).is_nan());
        }
    }

    /// The gates are continuous where the polynomials meet (within the bound) and monotone.
    #[test]
    fn gates_join_up_and_rise() {
        for gate in [&GELU_TANH, &GELU_ERF, &SILU] {
            let g = |x: f32| gate.apply(x) / x;
            for n in 1..INTERVALS {
                let edge = (n as f32 - 0.5) / gate.scale;
                let (below, above) = (edge * (1.0 - 1e-6), edge * (1.0 + 1e-6));
                assert!(
                    (g(above) - g(below)).abs() < 1e-6,
                    "{n}: {} {}",
                    g(below),
                    g(above)
                );
            }
            let mut x = 0.01f32;
            while x < 20.0 {
                let step = x * 1.01;
                assert!(g(step) >= g(x) - 1e-6, "{x}");
                x = step;
            }
        }
    }

    /// Each compiled kernel gives the scalar model's bits, on values that reach every
    /// interval, both signs, the clamps and the special values.
    #[test]
    fn every_kernel_gives_the_scalar_bits() {
        let mut values: Vec<f32> = (-4000..4000).map(|i| i as f32 * 0.0049).collect();
        values.extend([
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            -1e-45,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            5.272_8,
            -15.47,
        ]);
        let mut r = 0x2545_F491_u32;
        for _ in 0..4000 {
            r ^= r << 13;
            r ^= r >> 17;
            r ^= r << 5;
            values.push(f32::from_bits(r));
        }
        values.push(1.5); // an odd length: the scalar tail runs too
        for a in [
            Activation::Relu,
            Activation::GeluTanh,
            Activation::GeluErf,
            Activation::Silu,
        ] {
            let want: Vec<f32> = values.iter().map(|&v| a.apply(v)).collect();
            for isa in [VectorIsa::Avx512, VectorIsa::Avx2, VectorIsa::Baseline] {
                if !isa.supported() {
                    eprintln!("SKIP {a:?} on {isa:?}: this CPU lacks it");
                    continue;
                }
                let mut got = values.clone();
                activate(isa, a, &mut got);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                        "{a:?} on {isa:?}({}): {g:e}, want {w:e}",
                        values[i]
                    );
                }
            }
        }
    }
}
