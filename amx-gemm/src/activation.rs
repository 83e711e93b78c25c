//! The activations of the fused epilogue (step 5 of [`epilogue`](crate::epilogue)), in `f32`,
//! the same bits on every vector width, backend and CPU.
//!
//! Both GELUs are `x * g(x)` with a gate `g` that rises from 0 to 1 and satisfies
//! `g(-x) = 1 - g(x)` (the normal CDF, or the sigmoid of the tanh form's argument). The gate of
//! `|x|` is a table of 8 polynomials of degree 5:
//!
//! ```text
//! y = min(|x| * 1.25, 7)        n = y rounded to an integer (half to even)      t = y - n
//! h = c5[n] t^5 + ... + c0[n]   (Horner, fused multiply-adds)
//! g = h for x >= 0, 1 - h for x < 0        gelu(x) = max(x, f32::MIN) * g
//! ```
//!
//! Each step is one correctly rounded `f32` operation, so the scalar function, the AVX2
//! kernel and the AVX-512 kernel give the same bits. The vector kernels fetch each coefficient
//! with one register permute (8 entries: one `vpermps`, on 256-bit and 512-bit registers
//! alike): about 21 vector instructions per vector and no division. The textbook form
//! `x / (1 + exp(-2u))` needs a `vdivps`, which keeps the divider busy for about 10 cycles per
//! 512-bit vector, on top of an exponential.
//!
//! Polynomial 7 is exactly 1, so large inputs are exact: `gelu(x) = x` and `gelu(-x) = -0` for
//! `|x|` past 5.2, and `gelu(-inf) = -0` (the clamp to `f32::MIN` keeps `-inf * 0` from making a
//! NaN). The tables come from `scripts/fit-activations.py` (Chebyshev interpolation in double
//! precision, rounded to `f32`), which also reports the gates' worst errors: `2^-21.1`.
//!
//! SiLU, `x / (1 + exp(-x))`, is computed as written: an exponential (`2^n e^r`, a degree-6
//! polynomial) and a division; below -88, where the exponential would overflow, it is `-0`. The sigmoid saturates slowly, so a table would need high degrees
//! that cost more than the division on AVX2.

use crate::epilogue::VectorIsa;

/// The activation function of an [`Epilogue`](crate::Epilogue), computed in `f32`.
///
/// The transcendental ones (GELU, SiLU) use this crate's own `f32` approximations, the same
/// bits on every CPU and backend (see [`activation`](crate::activation)): for every finite
/// `x`, the computed value is within `TOLERANCE * (1 + |x|)` of the exact function
/// ([`Activation::TOLERANCE`]), which the tests check against `f64` over a dense sweep. NaN
/// stays NaN (ReLU gives 0); `+inf` gives `+inf`, and `-inf` gives `-0` for the GELUs and SiLU
/// (SiLU is `-0` below -88, where its exact value is under `6e-37` in magnitude) and 0 for
/// ReLU.
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
            Activation::Silu => silu(x),
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
        Activation::Silu => silu_all(isa, x),
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
    /// The CPU supports AVX-512F and DQ.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn wide(x: &mut [f32]) {
        use std::arch::x86_64::*;
        let (chunks, rest) = x.as_chunks_mut::<16>();
        for v in chunks {
            // SAFETY: `v` is 16 f32, read and written unaligned; the CPU supports what
            // `ReluLanes` needs (this function's contract).
            unsafe {
                _mm512_storeu_ps(v.as_mut_ptr(), ReluLanes.apply(_mm512_loadu_ps(v.as_ptr())))
            };
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
        // SAFETY: the CPU supports AVX-512F and DQ (`supported` checked it).
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
/// Polynomials per gate: one 256-bit register of `f32` per coefficient.
const INTERVALS: usize = 8;
/// The largest `y`: polynomial 7 covers `y` in `[6.5, 7]`, everything beyond is clamped.
const TOP: f32 = (INTERVALS - 1) as f32;
/// `1.5 * 2^23`: for `0 <= y <= 7`, `y + MAGIC` rounds `y` to an integer `n` (half to even),
/// held in the low bits of the sum's encoding (MAGIC's low 22 bits are 0).
const MAGIC: f32 = 12_582_912.0;

/// A gate `g` with `g(-x) = 1 - g(x)`, as 8 polynomials in `t` over `|x|` (see the
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
    scale: 1.25,
    coeffs: [
        bits([
            0x3f000000, 0x3f49bcf1, 0x3f71f123, 0x3f7df19e, 0x3f7fd9b6, 0x3f7ffed9, 0x3f7ffffd,
            0x3f800000,
        ]),
        bits([
            0x3ea3681d, 0x3e6d19ea, 0x3db6498f, 0x3c93b4fc, 0x3ae7e93d, 0x3893eeb2, 0x35774d42,
            0x00000000,
        ]),
        bits([
            0xa6df5f14, 0xbd97cb64, 0xbd67bb72, 0xbc8f0908, 0xbb1e9e48, 0xb9098b7c, 0xb6148563,
            0x00000000,
        ]),
        bits([
            0xbd0c1808, 0xbc0e4723, 0x3c6ebde9, 0x3c1551f2, 0x3afef3df, 0x391ecb70, 0x366e5665,
            0x00000000,
        ]),
        bits([
            0x27d61eab, 0x3c14fc94, 0x3aaf2c50, 0xbb1b4527, 0xba82d878, 0xb905548f, 0xb69f46f3,
            0x00000000,
        ]),
        bits([
            0x3b54c749, 0xb9c80db3, 0xbad9e348, 0x38572b50, 0x399c915c, 0x388b82cb, 0x3671ef2b,
            0x00000000,
        ]),
    ],
};
/// GELU, erf form: the normal CDF, `(1 + erf(x / sqrt(2))) / 2`.
const GELU_ERF: Gate = Gate {
    scale: 1.25,
    coeffs: [
        bits([
            0x3f000000, 0x3f49c3d2, 0x3f71f8ae, 0x3f7de6c6, 0x3f7fd2f7, 0x3f7ffdec, 0x3f7ffff3,
            0x3f800000,
        ]),
        bits([
            0x3ea3681d, 0x3e6d50bc, 0x3db5bb98, 0x3c92c3bb, 0x3af9fd49, 0x38e08909, 0x3654b32f,
            0x00000000,
        ]),
        bits([
            0xa6c0f866, 0xbd97d406, 0xbd68a765, 0xbc8cf28a, 0xbb1fe2ca, 0xb932d160, 0xb6c978ea,
            0x00000000,
        ]),
        bits([
            0xbd0b67c6, 0xbc11dc12, 0x3c71df84, 0x3c15114a, 0x3af66a85, 0x39336d91, 0x36f8eed9,
            0x00000000,
        ]),
        bits([
            0x27a0a155, 0x3c145711, 0x3abb19a0, 0xbb2160ba, 0xba7bbe51, 0xb9051def, 0xb6f6a584,
            0x00000000,
        ]),
        bits([
            0x3b502ab0, 0xb9a03baf, 0xbae24a7c, 0x38a27c0f, 0x399d5516, 0x38811bb5, 0x369ac579,
            0x00000000,
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
            // SAFETY: the CPU supports AVX-512F and DQ (`supported` checked it).
            VectorIsa::Avx512 if isa.supported() => unsafe { self.apply_avx512(x) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU supports AVX2 and FMA (`supported` checked it).
            VectorIsa::Avx2 if isa.supported() => unsafe { self.apply_avx2(x) },
            _ => x.iter_mut().for_each(|v| *v = self.apply(*v)),
        }
    }

    /// [`Gate::apply`], 16 lanes at a time (see [`GateLanes`]).
    ///
    /// # Safety
    /// The CPU supports AVX-512F and DQ.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn apply_avx512(&self, x: &mut [f32]) {
        use std::arch::x86_64::*;
        let gate = self.lanes();
        let (chunks, rest) = x.as_chunks_mut::<16>();
        for v in chunks {
            // SAFETY: `v` is 16 f32, read and written unaligned.
            unsafe { _mm512_storeu_ps(v.as_mut_ptr(), gate.apply(_mm512_loadu_ps(v.as_ptr()))) };
        }
        rest.iter_mut().for_each(|v| *v = self.apply(*v));
    }

    /// The gate's constants in registers, for [`GateLanes::apply`].
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq")]
    fn lanes(&self) -> GateLanes {
        use std::arch::x86_64::*;
        GateLanes {
            // The 8 entries in the low half; the indices never reach the (zeroed) upper half.
            // SAFETY: a row of coefficients is 8 f32, read unaligned.
            c: std::array::from_fn(|k| unsafe {
                _mm512_zextps256_ps512(_mm256_loadu_ps(self.coeffs[k].as_ptr()))
            }),
            scale: _mm512_set1_ps(self.scale),
            top: _mm512_set1_ps(TOP),
            magic: _mm512_set1_ps(MAGIC),
            one: _mm512_set1_ps(1.0),
            lowest: _mm512_set1_ps(f32::MIN),
        }
    }

    /// [`Gate::apply`], 8 lanes at a time.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn apply_avx2(&self, x: &mut [f32]) {
        use std::arch::x86_64::*;
        let c: [__m256; TERMS] = std::array::from_fn(|k| {
            // SAFETY: a row of coefficients is 8 f32, read unaligned.
            unsafe { _mm256_loadu_ps(self.coeffs[k].as_ptr()) }
        });
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
            // vpermps reads the low 3 bits of each index: n.
            let n = _mm256_castps_si256(s);
            let mut h = _mm256_permutevar8x32_ps(c[DEGREE], n);
            for ck in c[..DEGREE].iter().rev() {
                h = _mm256_fmadd_ps(h, t, _mm256_permutevar8x32_ps(*ck, n));
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

/// An activation on 16 values in a register: [`Activation::apply`]'s bits on each lane. For
/// callers that keep a row in registers from the accumulators to the output (see
/// [`deferred`](crate::deferred)).
#[cfg(target_arch = "x86_64")]
pub(crate) trait Lanes: Copy {
    /// The activation of each lane of `x`.
    ///
    /// # Safety
    /// The CPU supports AVX-512F and DQ.
    unsafe fn apply(&self, x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512;
}

/// [`Activation::Identity`] on 16 lanes.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct IdentityLanes;

#[cfg(target_arch = "x86_64")]
impl Lanes for IdentityLanes {
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn apply(&self, x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        x
    }
}

/// [`Activation::Relu`] on 16 lanes: `maxps(x, 0)`, as `relu_all`.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct ReluLanes;

#[cfg(target_arch = "x86_64")]
impl Lanes for ReluLanes {
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn apply(&self, x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        std::arch::x86_64::_mm512_max_ps(x, std::arch::x86_64::_mm512_setzero_ps())
    }
}

/// [`Activation::Silu`] on 16 lanes: `silu` and `exp_f32`, each intrinsic the scalar model's
/// operation of the same line (the clamp as `maxps` then `minps`, which keep a NaN as `clamp`
/// does; `fma(-n, c, x)` as VFNMADD, the same single rounding).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct SiluLanes;

#[cfg(target_arch = "x86_64")]
impl Lanes for SiluLanes {
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn apply(&self, x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        const LN2_HI: f32 = 0.693_359_4;
        const LN2_LO: f32 = -2.121_944_4e-4;
        let c = _mm512_set1_ps;
        // exp_f32(-x)
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(x),
            _mm512_set1_epi32(i32::MIN),
        ));
        let t = _mm512_min_ps(c(88.0), _mm512_max_ps(c(-87.0), neg));
        let shifted = _mm512_fmadd_ps(t, c(std::f32::consts::LOG2_E), c(MAGIC));
        let n = _mm512_sub_ps(shifted, c(MAGIC));
        let r = _mm512_fnmadd_ps(n, c(LN2_HI), t);
        let r = _mm512_fnmadd_ps(n, c(LN2_LO), r);
        let p = _mm512_fmadd_ps(c(1.0 / 720.0), r, c(1.0 / 120.0));
        let p = _mm512_fmadd_ps(p, r, c(1.0 / 24.0));
        let p = _mm512_fmadd_ps(p, r, c(1.0 / 6.0));
        let p = _mm512_fmadd_ps(p, r, c(0.5));
        let p = _mm512_fmadd_ps(p, r, c(1.0));
        let p = _mm512_fmadd_ps(p, r, c(1.0));
        let biased = _mm512_add_epi32(
            _mm512_sub_epi32(
                _mm512_castps_si512(shifted),
                _mm512_set1_epi32(MAGIC.to_bits() as i32),
            ),
            _mm512_set1_epi32(127),
        );
        let e = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32::<23>(biased)));
        // silu, -0 below SILU_ZERO_BELOW (a NaN compares false and stays)
        let y = _mm512_div_ps(x, _mm512_add_ps(c(1.0), e));
        let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, c(SILU_ZERO_BELOW));
        _mm512_mask_blend_ps(below, y, c(-0.0))
    }
}

/// A GELU gate's constants in registers: [`Gate::apply`] on 16 lanes, each intrinsic the scalar
/// model's operation of the same line.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
pub(crate) struct GateLanes {
    c: [std::arch::x86_64::__m512; TERMS],
    scale: std::arch::x86_64::__m512,
    top: std::arch::x86_64::__m512,
    magic: std::arch::x86_64::__m512,
    one: std::arch::x86_64::__m512,
    lowest: std::arch::x86_64::__m512,
}

#[cfg(target_arch = "x86_64")]
impl GateLanes {
    /// The gate of a GELU activation (`None` for the others).
    ///
    /// # Safety
    /// The CPU supports AVX-512F and DQ.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(crate) unsafe fn of(activation: Activation) -> Option<GateLanes> {
        match activation {
            Activation::GeluTanh => Some(GELU_TANH.lanes()),
            Activation::GeluErf => Some(GELU_ERF.lanes()),
            _ => None,
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for GateLanes {
    #[inline]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn apply(&self, x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // minps returns its second operand when the first is NaN: `f32::min`'s 7.
        let y = _mm512_min_ps(_mm512_mul_ps(_mm512_abs_ps(x), self.scale), self.top);
        let s = _mm512_add_ps(y, self.magic);
        // `y - rne(y)`, exact: the model's `y - (s - MAGIC)` in one instruction.
        let t = _mm512_reduce_ps::<0>(y);
        // vpermps reads the low 4 bits of each index: n, at most 7.
        let n = _mm512_castps_si512(s);
        let mut h = _mm512_permutexvar_ps(n, self.c[DEGREE]);
        for ck in self.c[..DEGREE].iter().rev() {
            h = _mm512_fmadd_ps(h, t, _mm512_permutexvar_ps(n, *ck));
        }
        let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
        let g = _mm512_mask_sub_ps(h, negative, self.one, h);
        let x = _mm512_max_ps(self.lowest, x);
        _mm512_mul_ps(x, g)
    }
}

/// `exp(x)` in `f32`, branch-free: `x` clamped to `[-87, 88]` (a NaN stays NaN), `2^n e^r` with
/// `n = rne(x / ln 2)` and a degree-6 Taylor polynomial for `|r| <= ln 2 / 2` (truncation below
/// `1.3e-7`), evaluated with fused multiply-adds, so within a few ulp.
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_359_4; // few significant bits: n * LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x.mul_add(std::f32::consts::LOG2_E, MAGIC);
    let n = shifted - MAGIC;
    let r = (-n).mul_add(LN2_HI, x);
    let r = (-n).mul_add(LN2_LO, r);
    let p = (1.0f32 / 720.0).mul_add(r, 1.0 / 120.0);
    let p = p.mul_add(r, 1.0 / 24.0);
    let p = p.mul_add(r, 1.0 / 6.0);
    let p = p.mul_add(r, 0.5);
    let p = p.mul_add(r, 1.0);
    let p = p.mul_add(r, 1.0);
    // n is an integer in [-126, 127], and `shifted`, in [2^23, 2^24) where the f32 spacing is
    // 1, holds it in its low bits: `shifted.to_bits() = MAGIC.to_bits() + n`. Integer
    // arithmetic on those bits (rather than a saturating `as i32`, which does not vectorize)
    // builds 2^n, a normal f32, from its exponent field.
    let biased = shifted
        .to_bits()
        .wrapping_sub(MAGIC.to_bits())
        .wrapping_add(127);
    let scale = f32::from_bits(biased << 23);
    p * scale
}

/// Below this SiLU is -0: the exponential of `-x` is clamped there, and `x / (1 + e^88)` would
/// grow with `|x|` (to -2 at `f32::MIN`) where the exact value is under `6e-37` in magnitude.
const SILU_ZERO_BELOW: f32 = -88.0;

#[inline(always)]
fn silu(x: f32) -> f32 {
    if x < SILU_ZERO_BELOW {
        -0.0
    } else {
        x / (1.0 + exp_f32(-x))
    }
}

/// SiLU over a slice, compiled for the widest vectors `isa` allows (the compiler vectorizes
/// the loop; its only fused multiply-adds are `exp_f32`'s explicit ones, exactly rounded on
/// every width).
fn silu_all(isa: VectorIsa, x: &mut [f32]) {
    #[inline(always)]
    fn body(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = silu(*v));
    }
    /// # Safety
    /// The CPU supports AVX-512F and DQ.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq")]
    unsafe fn wide(x: &mut [f32]) {
        body(x)
    }
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn narrow(x: &mut [f32]) {
        body(x)
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports AVX-512F and DQ (`supported` checked it).
        VectorIsa::Avx512 if isa.supported() => unsafe { wide(x) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU supports AVX2 and FMA (`supported` checked it).
        VectorIsa::Avx2 if isa.supported() => unsafe { narrow(x) },
        _ => body(x),
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
        ] {
            let mut x = 6.5 / gate.scale * (1.0 + f32::EPSILON);
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
        let silu = Activation::Silu;
        for x in [-88.5, -100.0, -1e30, f32::MIN, f32::NEG_INFINITY] {
            assert_eq!(silu.apply(x).to_bits(), (-0f32).to_bits(), "silu({x})");
        }
        assert!(silu.apply(-88.0) < 0.0 && silu.apply(-88.0) > -6e-37);
        assert_eq!(silu.apply(f32::INFINITY), f32::INFINITY);
        assert!(silu.apply(f32::NAN).is_nan());
    }

    /// The gates are continuous where the polynomials meet (within the bound) and monotone.
    #[test]
    fn gates_join_up_and_rise() {
        for gate in [&GELU_TANH, &GELU_ERF] {
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
            5.2,
            -5.200_001,
            87.5,
            -88.5,
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
