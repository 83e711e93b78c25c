//! Bit-exact arithmetic of the AMX dot-product instructions
//! ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md) sections 8 to 11).
//!
//! Tiles are `[u8; 1024]`: 16 rows of 64 bytes, row `r` at bytes `r * 64..r * 64 + 64`, all
//! little-endian; element `2k` of a row of 16-bit values is the low half of dword `k`.
//!
//! Layout of this module:
//! * [`exact`]: the reference model (integer significands, one round-to-nearest-even, the FTZ
//!   rule of section 10.7). It is the oracle the fast paths are tested against, and the fallback
//!   for the rare output lanes a vector kernel cannot finish on its own.
//! * [`scalar`]: portable fast paths: plain integer loops for `TDPB[SU][SU]D`, and `f32::mul_add`
//!   after DAZ plus the fix-ups listed at the end of section 10 for the floating-point products.
//!   On x86-64 they are also compiled with AVX2 / FMA and chosen when the CPU has them.
//! * `avx512` (x86-64 only): VPDPBUSD for the integer products and a VFMADD231PS kernel run under
//!   an AMX-like MXCSR for TDPBF16PS/TDPFP16PS, chosen at run time.
//! * `avx_vnni` (x86-64 only): VPDPBUSD on 256-bit vectors (AVX-VNNI) for the integer products,
//!   where AVX-512 VNNI is absent but AVX-VNNI is not.
//! * `avx2` (x86-64 only): VPMADDWD on bytes extended to i16 for the integer products, and the
//!   same MXCSR scheme on 256-bit vectors for the floating-point ones, where AVX-512 is absent.
//!
//! The public-in-crate functions run the fastest path the CPU supports, decided once per
//! process ([`int8_path`], [`float_path`]). All paths give the same bits; the tests check each
//! of them against the oracle.

// Off x86-64 nothing but the tests calls the exact model (there it is the NaN-lane fallback).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod exact;
mod scalar;

pub(crate) mod block;
pub(crate) mod complex;
pub(crate) mod fp8;
pub(crate) mod row;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx_vnni;
#[cfg(target_arch = "x86_64")]
mod pairs;

#[cfg(test)]
mod tests;

// The exact step functions are crate API (for tests and other modules); nothing outside the
// tests needs them yet.
#[cfg_attr(not(test), allow(unused_imports))]
pub(crate) use exact::{add32, fma32};

use core::sync::atomic::{AtomicU8, Ordering};
use std::fmt;

/// The implementation the emulator runs for a family of dot products on this CPU, chosen once
/// per process from the CPU's features.
///
/// The environment variable `AMX_EMULATOR_KERNELS` caps the choice: `avx512`, `avx-vnni`,
/// `avx2` or `portable` allows that path and the ones after it in this enum's order (so
/// `AMX_EMULATOR_KERNELS=avx2` on an AVX-512 CPU runs what an AVX2-only CPU runs). Every path
/// computes the same bits; only the speed differs. Unset, empty, `auto` or not understood, it
/// caps nothing. `avx512` also keeps the bf16 products on FMAs where the CPU could run them
/// on VDPBF16PS (see [`KernelPath::Avx512`]); `avx512-bf16` allows that too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KernelPath {
    /// AVX-512 kernels: VPDPBUSD (AVX-512 VNNI) for the integer products, VFMADD231PS on
    /// 512-bit vectors under an AMX-like MXCSR for the floating-point ones. On a CPU with
    /// AVX512_BF16 whose VDPBF16PS passes a check at start-up, the bf16 products (of 2x2 blocks
    /// and rows of tiles, the GEMM's, and single instructions with an even K) run VDPBF16PS
    /// instead, two k-steps of a lane per instruction, with the same bits.
    Avx512,
    /// The integer products only, on CPUs with AVX-VNNI but not AVX-512 VNNI: VPDPBUSD on
    /// 256-bit vectors (VEX encoding). Such CPUs run the floating-point products on
    /// [`KernelPath::Avx2`].
    AvxVnni,
    /// AVX2 kernels: VPMADDWD + VPADDD on bytes extended to 16 bits for the integer products,
    /// VFMADD231PS on 256-bit vectors under an AMX-like MXCSR (with FMA and F16C) for the
    /// floating-point ones.
    Avx2,
    /// Plain Rust loops (compiled with FMA for the floating-point products where the CPU has
    /// it): every other CPU, and x86-64 CPUs whose DAZ/FTZ fail the emulator's start-up check.
    Portable,
}

impl fmt::Display for KernelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KernelPath::Avx512 => "AVX-512",
            KernelPath::AvxVnni => "AVX-VNNI",
            KernelPath::Avx2 => "AVX2",
            KernelPath::Portable => "portable",
        })
    }
}

/// Rows in a tile.
const ROWS: usize = 16;
/// Dwords in a tile row.
const DWORDS: usize = 16;

// fp32 bit-pattern constants.
const SIGN: u32 = 0x8000_0000;
const EXP_MASK: u32 = 0x7F80_0000;
const FRAC_MASK: u32 = 0x007F_FFFF;
const INF: u32 = 0x7F80_0000;
const QUIET: u32 = 0x0040_0000;
/// The default NaN ("real indefinite") the hardware writes for inf*0 and inf-inf.
const DEFAULT_NAN: u32 = 0xFFC0_0000;
/// The smallest normal magnitude, 2^-126.
const MIN_NORMAL: u32 = 0x0080_0000;
/// 1.0f32; `add32(x, y)` is `fma32(x, ONE, y)`.
const ONE: u32 = 0x3F80_0000;

/// The element type of a floating-point dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Half {
    /// bfloat16 (TDPBF16PS).
    Bf16,
    /// IEEE binary16 (TDPFP16PS).
    Fp16,
}

/// `C[m][n] += sum_{k<K} sum_{i<4} ext_a(A[m].byte[4k+i]) * ext_b(B[k].byte[4n+i])  (mod 2^32)`
/// for `m < m_rows`, `n < n_dwords`, with `K = k_dwords`. `a_signed`/`b_signed` choose sign or
/// zero extension (TDPBSSD: both signed, TDPBSUD: A signed, TDPBUSD: B signed, TDPBUUD: neither).
///
/// Only those C elements are written. Out-of-range sizes are clamped to the tile (callers never
/// pass them; clamping keeps this function panic-free).
///
/// The dispatchers here are inlined into the emulator's instructions (see `dot_shaped` there
/// for the cost of a call chain between two products).
#[allow(clippy::too_many_arguments)] // the shape of the instruction, as the emulator calls it
#[inline(always)]
pub(crate) fn dot_int8(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    a_signed: bool,
    b_signed: bool,
) {
    // SAFETY: int8_path chose a path whose features the CPU has.
    unsafe {
        int8_kernel(
            int8_path(),
            c,
            a,
            b,
            (m_rows, n_dwords, k_dwords),
            (a_signed, b_signed),
        )
    }
}

/// What the AVX-512 TDPBSSD kernel subtracts from row m of C: `128 * sum_k A[m][k]` over the
/// bytes of A's first `k_dwords` dwords per row (the kernel biases B by 0x80 into VPDPBUSD's
/// unsigned operand, and A's dwords stay its broadcast operand). It depends on A's bytes and K
/// alone, so the emulator keeps it per tile while the tile is unchanged, as it keeps widened
/// floating-point operands.
///
/// Updated in place and read by reference, never moved: the kernel reads the sums as
/// broadcast dwords, which a copy through smaller moves would make wait for the copy's stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowCorrections {
    /// The K (clamped to 16) the sums cover; [`RowCorrections::NONE`] when there are none.
    k_dwords: usize,
    sums: [i32; ROWS],
}

impl RowCorrections {
    /// No corrections (of any K).
    pub(crate) const NONE: RowCorrections = RowCorrections {
        k_dwords: usize::MAX,
        sums: [0; ROWS],
    };

    /// Forgets the corrections (A was written).
    #[inline]
    pub(crate) fn forget(&mut self) {
        self.k_dwords = usize::MAX;
    }

    /// The corrections of `a` over `k_dwords`, kept if they are, computed now if they are not
    /// (the caller forgets them when A changes); `false` where this CPU's integer kernel does not
    /// read them (nothing is computed then).
    #[inline]
    pub(crate) fn update(&mut self, a: &[u8; 1024], k_dwords: usize) -> bool {
        let k_dwords = k_dwords.min(DWORDS);
        if self.k_dwords == k_dwords {
            return true;
        }
        match int8_path() {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => {
                // SAFETY: int8_path chose AVX-512, so the CPU has AVX-512F and AVX-512 VNNI.
                unsafe { avx512::row_corrections(a, k_dwords, &mut self.sums) };
                self.k_dwords = k_dwords;
                true
            }
            _ => false,
        }
    }

    /// The K the kept sums cover, if any.
    #[cfg(test)]
    pub(crate) fn k_dwords(&self) -> Option<usize> {
        (self.k_dwords != usize::MAX).then_some(self.k_dwords)
    }
}

/// TDPBSSD ([`dot_int8`] with both operands signed) given `corr`, the [`RowCorrections`] of
/// this A: the same bits, without computing them again. Corrections for another K than
/// `k_dwords` are not used (the product is computed as by [`dot_int8`]).
#[inline(always)]
pub(crate) fn dot_int8_ss_corrected(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    corr: &RowCorrections,
) {
    let (m, n, k) = clamp(m_rows, n_dwords, k_dwords);
    #[cfg(target_arch = "x86_64")]
    if corr.k_dwords == k && int8_path() == KernelPath::Avx512 {
        // SAFETY: int8_path chose AVX-512, so the CPU has AVX-512F and AVX-512 VNNI; `corr`
        // holds A's sums over the k dwords of this product.
        unsafe { avx512::dot_int8_ss_corrected(c, a, b, (m, n, k), &corr.sums) };
        return;
    }
    dot_int8(c, a, b, m, n, k, true, true);
}

/// [`dot_int8`] on the kernel of `path`.
///
/// # Safety
/// The CPU has the features of `path` ([`int8_path_available`]).
#[inline(always)]
unsafe fn int8_kernel(
    path: KernelPath,
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    (a_signed, b_signed): (bool, bool),
) {
    let (m, n, k) = clamp(m_rows, n_dwords, k_dwords);
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F, AVX-512BW and AVX-512 VNNI (this function's contract).
        KernelPath::Avx512 => unsafe { avx512::dot_int8(c, a, b, m, n, k, a_signed, b_signed) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 and AVX-VNNI (this function's contract).
        KernelPath::AvxVnni => unsafe { avx_vnni::dot_int8(c, a, b, m, n, k, a_signed, b_signed) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2 (this function's contract).
        KernelPath::Avx2 => unsafe { avx2::dot_int8(c, a, b, m, n, k, a_signed, b_signed) },
        _ => scalar::dot_int8_portable(c, a, b, (m, n, k), a_signed, b_signed),
    }
}

/// Whether this CPU can run the integer kernel of `path`.
#[cfg_attr(not(any(test, feature = "peak")), allow(dead_code))] // for measuring only
pub(crate) fn int8_path_available(path: KernelPath) -> bool {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => avx512::int8_available(),
        #[cfg(target_arch = "x86_64")]
        KernelPath::AvxVnni => avx_vnni::int8_available(),
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => avx2::int8_available(),
        KernelPath::Portable => true,
        #[cfg(not(target_arch = "x86_64"))]
        _ => false,
    }
}

/// [`dot_int8`] on the kernel of `path` instead of the selected one (for benchmarks that
/// compare the kernels on one CPU); `false`, with nothing computed, where the CPU lacks it.
#[cfg_attr(not(any(test, feature = "peak")), allow(dead_code))] // for measuring only
pub(crate) fn dot_int8_on(
    path: KernelPath,
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    shape: (usize, usize, usize),
    signs: (bool, bool),
) -> bool {
    if !int8_path_available(path) {
        return false;
    }
    // SAFETY: the CPU has the features of `path` (checked just above).
    unsafe { int8_kernel(path, c, a, b, shape, signs) };
    true
}

/// Encodes a path for the caches below (0 means "not decided yet").
fn path_code(path: KernelPath) -> u8 {
    match path {
        KernelPath::Avx512 => 1,
        KernelPath::Avx2 => 2,
        KernelPath::Portable => 3,
        KernelPath::AvxVnni => 4,
    }
}

fn path_of(code: u8) -> Option<KernelPath> {
    match code {
        1 => Some(KernelPath::Avx512),
        2 => Some(KernelPath::Avx2),
        3 => Some(KernelPath::Portable),
        4 => Some(KernelPath::AvxVnni),
        _ => None,
    }
}

/// The variable that caps the kernels the dispatch may choose: `avx512`, `avx-vnni`, `avx2` or
/// `portable` (any case, blanks around ignored) allows that path and the ones below it in the
/// order AVX-512, AVX-VNNI, AVX2, portable, and caps the row copies' width alike
/// ([`copy_path`]). Every path computes the same bits, so the cap changes speed only: it lets a
/// CPU with AVX-512 run what an AVX2-only CPU runs. `avx512-bf16` ranks above `avx512`: it
/// allows the bf16 kernels on VDPBF16PS ([`bf16_pairs`]), which `avx512` excludes. Unset,
/// empty, `auto` or a value not understood: no cap.
pub(crate) const KERNELS_ENV: &str = "AMX_EMULATOR_KERNELS";

/// A path's place in the cap's order (higher: more capable).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // one path there
fn rank(path: KernelPath) -> u8 {
    match path {
        KernelPath::Portable => 0,
        KernelPath::Avx2 => 1,
        KernelPath::AvxVnni => 2,
        KernelPath::Avx512 => 3,
    }
}

/// The highest rank [`KERNELS_ENV`] allows. Read when a path is decided (once per process and
/// family), never per instruction.
#[cold]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // one path there
fn kernel_cap() -> u8 {
    std::env::var(KERNELS_ENV).map_or(u8::MAX, |text| cap_of(&text))
}

/// The highest rank a value of [`KERNELS_ENV`] allows (`u8::MAX`: no cap).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // one path there
fn cap_of(text: &str) -> u8 {
    let path = match text.trim().to_ascii_lowercase().as_str() {
        "avx512-bf16" | "avx512bf16" | "avx-512-bf16" => return PAIRS_RANK,
        "avx512" | "avx-512" => KernelPath::Avx512,
        "avx-vnni" | "avxvnni" => KernelPath::AvxVnni,
        "avx2" => KernelPath::Avx2,
        "portable" => KernelPath::Portable,
        _ => return u8::MAX,
    };
    rank(path)
}

/// The integer products' kernel on this CPU: decided on first use, then one relaxed load (the
/// feature tests are not repeated per instruction).
#[inline]
pub(crate) fn int8_path() -> KernelPath {
    static PATH: AtomicU8 = AtomicU8::new(0);
    if let Some(path) = path_of(PATH.load(Ordering::Relaxed)) {
        return path;
    }
    #[cfg(target_arch = "x86_64")]
    let path = {
        let cap = kernel_cap();
        let allowed = |path| rank(path) <= cap;
        if allowed(KernelPath::Avx512) && avx512::int8_available() {
            KernelPath::Avx512
        } else if allowed(KernelPath::AvxVnni) && avx_vnni::int8_available() {
            KernelPath::AvxVnni
        } else if allowed(KernelPath::Avx2) && avx2::int8_available() {
            KernelPath::Avx2
        } else {
            KernelPath::Portable
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let path = KernelPath::Portable;
    // Racing threads decide the same; storing twice is harmless.
    PATH.store(path_code(path), Ordering::Relaxed);
    path
}

/// The vector width the emulator's row copies (TILELOADD, TILESTORED) are compiled for on
/// this CPU, within the cap of [`KERNELS_ENV`]: [`KernelPath::Avx512`] (one 64-byte move per
/// row), [`KernelPath::Avx2`] (two 32-byte moves) or [`KernelPath::Portable`] (the baseline
/// build's 16-byte moves). Decided on first use.
#[inline]
pub(crate) fn copy_path() -> KernelPath {
    static PATH: AtomicU8 = AtomicU8::new(0);
    if let Some(path) = path_of(PATH.load(Ordering::Relaxed)) {
        return path;
    }
    #[cfg(target_arch = "x86_64")]
    let path = {
        let cap = kernel_cap();
        if rank(KernelPath::Avx512) <= cap && std::arch::is_x86_feature_detected!("avx512f") {
            KernelPath::Avx512
        } else if rank(KernelPath::Avx2) <= cap && std::arch::is_x86_feature_detected!("avx2") {
            KernelPath::Avx2
        } else {
            KernelPath::Portable
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let path = KernelPath::Portable;
    PATH.store(path_code(path), Ordering::Relaxed);
    path
}

/// The floating-point products' kernel on this CPU: AVX-512 or AVX2 where the CPU has them, its
/// DAZ/FTZ pass the self-check and [`KERNELS_ENV`] allows them, else the portable one. Decided
/// on first use.
#[inline]
pub(crate) fn float_path() -> KernelPath {
    static PATH: AtomicU8 = AtomicU8::new(0);
    if let Some(path) = path_of(PATH.load(Ordering::Relaxed)) {
        return path;
    }
    #[cfg(target_arch = "x86_64")]
    let path = {
        let cap = kernel_cap();
        let allowed = |path| rank(path) <= cap;
        if allowed(KernelPath::Avx512) && avx512::float_available() {
            KernelPath::Avx512
        } else if allowed(KernelPath::Avx2) && avx2::float_available() {
            KernelPath::Avx2
        } else {
            KernelPath::Portable
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    let path = KernelPath::Portable;
    PATH.store(path_code(path), Ordering::Relaxed);
    path
}

/// `decide()`, computed on the first call for `state` and kept there (0: not decided yet, 1:
/// true, 2: false): the answer to a question about the CPU that does not change while the
/// process runs. Racing threads compute the same answer; storing it twice is harmless.
#[inline]
fn decided_once(state: &AtomicU8, decide: impl FnOnce() -> bool) -> bool {
    match state.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let yes = decide();
            state.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

/// The rank [`KERNELS_ENV`] gives the bf16 kernels on VDPBF16PS, above AVX-512's: the value
/// `avx512` caps the bf16 products at the FMA kernels, `avx512-bf16` (or no cap) allows both.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // one path there
const PAIRS_RANK: u8 = 4;

/// Whether the AVX-512 bf16 kernels run VDPBF16PS, two k-steps per instruction ([`pairs`]),
/// the block and row kernels (the GEMM's) among them: on the AVX-512 float path, where the CPU
/// has AVX512_BF16 and its VDPBF16PS passes the check at start-up, unless [`KERNELS_ENV`] caps
/// the kernels at `avx512` or below. Decided on first use. Single instructions run it too where the emulator
/// keeps their operands re-paired and K is even ([`reads_paired`]).
#[inline]
pub(crate) fn bf16_pairs() -> bool {
    static STATE: AtomicU8 = AtomicU8::new(0);
    decided_once(&STATE, || {
        #[cfg(target_arch = "x86_64")]
        return float_path() == KernelPath::Avx512
            && kernel_cap() >= PAIRS_RANK
            && avx512::pairs_available();
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Runs a floating-point kernel on the cases where hardware DAZ/FTZ could plausibly differ from
/// section 10 and compares it with the exact model; `run(c, a, b, m, n, k)` is the kernel on
/// bf16 tiles.
///
/// Intel documents underflow (and so FTZ) as "the rounded result, with unbounded exponent, is
/// below the smallest normal", which is rule 10.7, and Sapphire Rapids silicon agrees. Other x86
/// implementations word it less precisely, so rather than trust them a vector kernel is used
/// only where it reproduces: tininess after rounding both ways round (the two 2^-126 chains of
/// section 10), an exactly representable denormal result flushed with its sign, and DAZ of a
/// denormal C and of a denormal product input. It costs a few kernel calls, once per process.
#[cfg(target_arch = "x86_64")]
#[cold]
fn daz_ftz_self_check(
    run: impl Fn(&mut [u8; 1024], &[u8; 1024], &[u8; 1024], usize, usize, usize),
) -> bool {
    // (C, [(A dword, B dword) for k = 0, 1]), bf16 pairs with the odd element zero.
    const CASES: [(u32, [(u32, u32); 2]); 5] = [
        (0, [(0x2000, 0x2000), (0x9A00, 0x1A00)]), // 2^-126 - 2^-150 -> +0
        (0, [(0x2000, 0x2000), (0x9A00, 0x1980)]), // 2^-126 - 2^-151 -> 2^-126
        (0x8000_0000, [(0x9F00, 0x1F00), (0, 0)]), // -2^-130 -> -0
        (0x0040_0000, [(0x2000, 0x2000), (0, 0)]), // DAZ(2^-127) + 2^-126 -> 2^-126
        (0, [(0x0001, 0x7F00), (0, 0)]),           // DAZ(bf16 denormal) * 2^127 -> +0
    ];
    CASES.iter().all(|&(c0, pairs)| {
        let (mut a, mut b, mut c) = ([0u8; 1024], [0u8; 1024], [0u8; 1024]);
        set_dword(&mut c, 0, 0, c0);
        for (k, &(x, y)) in pairs.iter().enumerate() {
            set_dword(&mut a, 0, k, x);
            set_dword(&mut b, k, 0, y);
        }
        let want = exact::dot_element(c0, &a, &b, 0, 0, 2, Half::Bf16);
        run(&mut c, &a, &b, 1, 1, 2);
        get_dword(&c, 0, 0) == want
    })
}

/// TDPBF16PS
/// ([semantics.md section 10](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#10-tdpbf16ps-the-bit-exact-formula)):
/// for `m < m_rows`, `n < n_dwords`,
/// `C[m][n] = add32(C[m][n], add32(te, to))` where the two fp32 lanes `te`, `to` start at +0.0
/// and accumulate `fma32` of the even and odd bf16 pairs in increasing `k < k_dwords`.
#[inline(always)]
pub(crate) fn dot_bf16(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
) {
    dot_half(c, a, b, m_rows, n_dwords, k_dwords, Half::Bf16);
}

/// TDPFP16PS
/// ([semantics.md section 11](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#11-tdpfp16ps-amx-fp16)):
/// the TDPBF16PS formula with the fp16 inputs converted
/// exactly to fp32 (fp16 denormals become normal fp32 values and are never flushed); C is DAZ'd
/// and every step flushes tiny results.
#[inline(always)]
pub(crate) fn dot_fp16(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
) {
    dot_half(c, a, b, m_rows, n_dwords, k_dwords, Half::Fp16);
}

/// Dispatch shared by [`dot_bf16`] and [`dot_fp16`].
#[inline(always)]
fn dot_half(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    // SAFETY: float_path chose a path whose kernel the CPU runs (features and self-check).
    unsafe { half_kernel(float_path(), c, a, b, (m_rows, n_dwords, k_dwords), half) }
}

/// A tile's bf16 or fp16 pairs widened to fp32: row `r` of `even` holds the fp32 values of
/// the even elements of row `r`'s 16 dwords, `odd` those of the odd elements. It is what the
/// AVX-512 and AVX2 floating-point kernels read, for A as for B, so the emulator can keep a
/// tile's widened form while the tile is unchanged ([`reads_widened`]). The same 2 KiB hold
/// a tile's bytes extended to i16 for the AVX2 integer kernel ([`extend`]; for the block
/// kernel's B, in its split layout, [`extend_split`]): see [`Form`].
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Widened {
    pub(crate) even: [u8; 1024],
    pub(crate) odd: [u8; 1024],
}

impl Widened {
    pub(crate) const ZERO: Widened = Widened {
        even: [0; 1024],
        odd: [0; 1024],
    };
}

/// What a tile's kept [`Widened`] holds: its pairs widened as `Half`, or its bytes extended to
/// i16, sign-extended where `signed` ([`extend`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// [`widen`] as bf16 or fp16.
    Half(Half),
    /// [`pair`]: bf16 re-paired for VDPBF16PS, as A or (`b`) as B.
    Pairs {
        /// As B rather than as A.
        b: bool,
    },
    /// [`extend`], signed or unsigned.
    Bytes {
        /// Sign- rather than zero-extended.
        signed: bool,
    },
}

/// Whether the selected integer kernel reads operands extended to i16 (the AVX2 one), so that
/// extending a tile once for several products pays ([`extend`], [`dot_int8_extended`]).
#[inline(always)]
pub(crate) fn reads_extended() -> bool {
    #[cfg(target_arch = "x86_64")]
    return int8_path() == KernelPath::Avx2;
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Extends `tile`'s bytes to i16 into `out` where [`reads_extended`]; elsewhere leaves `out`
/// as it is (nothing reads it there).
pub(crate) fn extend(tile: &[u8; 1024], signed: bool, out: &mut Widened) {
    #[cfg(target_arch = "x86_64")]
    if int8_path() == KernelPath::Avx2 {
        // SAFETY: the AVX2 integer path was selected, so the CPU has AVX2.
        unsafe { avx2::extend(tile, signed, out) };
    }
    let _ = (tile, signed, out);
}

/// Extends `tile`'s bytes to i16 into `out` in the layout the AVX2 block kernel reads B in
/// (see `block::Preparation`) where the integer path is AVX2; elsewhere leaves `out` as it is
/// (nothing reads it there).
pub(crate) fn extend_split(tile: &[u8; 1024], signed: bool, out: &mut Widened) {
    #[cfg(target_arch = "x86_64")]
    if int8_path() == KernelPath::Avx2 {
        // SAFETY: the AVX2 integer path was selected, so the CPU has AVX2.
        unsafe { avx2::extend_split(tile, signed, out) };
    }
    let _ = (tile, signed, out);
}

/// [`dot_int8`] with `aw` and `bw` the extended forms of A and B ([`extend`], with the
/// signedness the instruction gives each): the same result, without extending the operands,
/// where [`reads_extended`]; elsewhere the ordinary kernel on `a` and `b` with `signs`.
#[inline(always)]
pub(crate) fn dot_int8_extended(
    c: &mut [u8; 1024],
    (a, aw): (&[u8; 1024], &Widened),
    (b, bw): (&[u8; 1024], &Widened),
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    signs: (bool, bool),
) {
    #[cfg(target_arch = "x86_64")]
    if int8_path() == KernelPath::Avx2 {
        // SAFETY: the AVX2 integer path was selected, so the CPU has AVX2.
        unsafe { avx2::dot_int8_extended(c, aw, bw, m_rows, n_dwords, k_dwords) };
        return;
    }
    let _ = (aw, bw);
    dot_int8(c, a, b, m_rows, n_dwords, k_dwords, signs.0, signs.1);
}

/// Whether a TDPBF16PS over `k_dwords` runs on operands re-paired for VDPBF16PS ([`pair`],
/// [`dot_bf16_paired`]): where [`bf16_pairs`] and K (clamped to 16) is even, as each pair
/// holds two k-steps. Other K run on the widened operands.
#[inline(always)]
pub(crate) fn reads_paired(k_dwords: usize) -> bool {
    bf16_pairs() && k_dwords.min(DWORDS).is_multiple_of(2)
}

/// Re-pairs `tile` into `out` as A or (`as_b`) as B where [`bf16_pairs`]; elsewhere leaves
/// `out` as it is (nothing reads it there).
pub(crate) fn pair(tile: &[u8; 1024], as_b: bool, out: &mut Widened) {
    #[cfg(target_arch = "x86_64")]
    if bf16_pairs() {
        // SAFETY: bf16_pairs found AVX-512F and AVX512BW (pairs_available).
        unsafe { avx512::pair_tile(tile, as_b, out) };
    }
    let _ = (tile, as_b, out);
}

/// [`dot_bf16`] with `aw` and `bw` the re-paired forms of `a` (as A) and `b` (as B)
/// ([`pair`]): the same result, on VDPBF16PS, where [`reads_paired`]; elsewhere the ordinary
/// kernel on `a` and `b`.
#[inline(always)]
pub(crate) fn dot_bf16_paired(
    c: &mut [u8; 1024],
    (a, aw): (&[u8; 1024], &Widened),
    (b, bw): (&[u8; 1024], &Widened),
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
) {
    #[cfg(target_arch = "x86_64")]
    if reads_paired(k_dwords) {
        // SAFETY: bf16_pairs found AVX-512F and AVX512_BF16 and a VDPBF16PS that passed the
        // check (pairs_available); K clamped to 16 is even (reads_paired).
        unsafe { avx512::dot_bf16_paired(c, (a, aw), (b, bw), (m_rows, n_dwords, k_dwords)) };
        return;
    }
    let _ = (aw, bw);
    dot_bf16(c, a, b, m_rows, n_dwords, k_dwords);
}

/// Whether the selected floating-point kernel reads widened operands, so that widening a tile
/// once for several products pays ([`widen`], [`dot_half_widened`]).
pub(crate) fn reads_widened() -> bool {
    #[cfg(target_arch = "x86_64")]
    return matches!(float_path(), KernelPath::Avx512 | KernelPath::Avx2);
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Widens `tile` into `out` where [`reads_widened`]; elsewhere leaves `out` as it is (nothing
/// reads it there).
pub(crate) fn widen(tile: &[u8; 1024], half: Half, out: &mut Widened) {
    #[cfg(target_arch = "x86_64")]
    match float_path() {
        // SAFETY: the AVX-512 float path was selected, so the CPU has AVX-512F.
        KernelPath::Avx512 => unsafe { avx512::widen(tile, half, out) },
        // SAFETY: the AVX2 float path was selected, so the CPU has AVX2, FMA and F16C.
        KernelPath::Avx2 => unsafe { avx2::widen(tile, half, out) },
        _ => {}
    }
    let _ = (tile, half, out);
}

/// [`dot_bf16`] or [`dot_fp16`] (`half`) with `aw` and `bw` the widened forms of `a` and `b`
/// ([`widen`]): the same result, without converting the operands where [`reads_widened`];
/// elsewhere the ordinary kernel on `a` and `b`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) fn dot_half_widened(
    c: &mut [u8; 1024],
    (a, aw): (&[u8; 1024], &Widened),
    (b, bw): (&[u8; 1024], &Widened),
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    #[cfg(target_arch = "x86_64")]
    match float_path() {
        KernelPath::Avx512 => {
            // SAFETY: the AVX-512 float path was selected: AVX-512F present, DAZ/FTZ
            // self-checked.
            unsafe {
                avx512::dot_half_widened(c, (a, aw), (b, bw), m_rows, n_dwords, k_dwords, half)
            };
            return;
        }
        KernelPath::Avx2 => {
            // SAFETY: the AVX2 float path was selected: AVX2, FMA and F16C present, DAZ/FTZ
            // self-checked.
            unsafe {
                avx2::dot_half_widened(c, (a, aw), (b, bw), m_rows, n_dwords, k_dwords, half)
            };
            return;
        }
        _ => {}
    }
    let _ = (aw, bw);
    dot_half(c, a, b, m_rows, n_dwords, k_dwords, half);
}

/// Decides now what the dispatch would decide on first use: the standard library's CPU
/// feature cache, the integer and floating-point paths (with the DAZ/FTZ self-check) and the
/// row copies' width. The trap engine calls it before it makes `cpuid` fault: a detection
/// that ran `cpuid` inside its SIGILL handler, where every signal is blocked, would kill the
/// process. A new `Emulator` calls it too (see `Emulator::unconfigured`).
pub(crate) fn decide_paths() {
    #[cfg(target_arch = "x86_64")]
    let _ = std::arch::is_x86_feature_detected!("avx512f");
    let _ = (int8_path(), float_path(), copy_path(), bf16_pairs());
}

/// Whether this CPU can run the floating-point kernel of `path` (its features, and the
/// DAZ/FTZ self-check for the vector kernels).
#[cfg_attr(not(any(test, feature = "peak")), allow(dead_code))] // for measuring only
pub(crate) fn float_path_available(path: KernelPath) -> bool {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512 => avx512::float_available(),
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx2 => avx2::float_available(),
        KernelPath::Portable => true,
        _ => false,
    }
}

/// [`dot_bf16`] or [`dot_fp16`] on the kernel of `path` instead of the selected one (for
/// benchmarks that compare the kernels on one CPU); `false`, with nothing computed, where the
/// CPU lacks it.
#[cfg_attr(not(any(test, feature = "peak")), allow(dead_code))] // for measuring only
pub(crate) fn dot_half_on(
    path: KernelPath,
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    shape: (usize, usize, usize),
    half: Half,
) -> bool {
    if !float_path_available(path) {
        return false;
    }
    // SAFETY: the CPU runs the kernel of `path` (checked just above).
    unsafe { half_kernel(path, c, a, b, shape, half) };
    true
}

/// [`dot_half`] on the kernel of `path`.
///
/// # Safety
/// The CPU runs the kernel of `path` ([`float_path_available`]).
#[inline(always)]
unsafe fn half_kernel(
    path: KernelPath,
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    half: Half,
) {
    let (m, n, k) = clamp(m_rows, n_dwords, k_dwords);
    match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX-512F and passed the self-check (this function's contract).
        KernelPath::Avx512 => unsafe { avx512::dot_half(c, a, b, m, n, k, half) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has AVX2, FMA and F16C and passed the self-check (this function's
        // contract).
        KernelPath::Avx2 => unsafe { avx2::dot_half(c, a, b, m, n, k, half) },
        _ => {
            // The silicon neither reads nor writes MXCSR (section 10), but the scalar path's
            // `f32` arithmetic sets its sticky exception flags: give the caller its own MXCSR
            // back.
            #[cfg(target_arch = "x86_64")]
            let mxcsr = read_mxcsr();
            scalar::dot_half(c, a, b, m, n, k, half);
            #[cfg(target_arch = "x86_64")]
            write_mxcsr(mxcsr);
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn read_mxcsr() -> u32 {
    let mut value = 0u32;
    // SAFETY: STMXCSR writes 4 bytes to `value`, a live local; SSE is baseline on x86-64.
    unsafe {
        core::arch::asm!("stmxcsr [{}]", in(reg) &mut value, options(nostack, preserves_flags))
    };
    value
}

#[cfg(target_arch = "x86_64")]
fn write_mxcsr(value: u32) {
    // SAFETY: LDMXCSR reads 4 bytes from `value`, an MXCSR value STMXCSR produced (no reserved
    // bit set), restoring the caller's floating-point environment.
    unsafe {
        core::arch::asm!("ldmxcsr [{}]", in(reg) &value, options(nostack, readonly, preserves_flags))
    };
}

/// The fp32 bit pattern of a bfloat16 value: `h << 16` (exact by construction).
#[inline]
pub(crate) fn bf16_to_f32_bits(h: u16) -> u32 {
    u32::from(h) << 16
}

/// The fp32 bit pattern of an IEEE binary16 value, converted exactly.
///
/// fp16 denormals become normal fp32 numbers. Infinities stay infinities and NaNs keep their sign
/// and payload (shifted into the top of the fp32 fraction) without being quieted, so a signalling
/// fp16 NaN stays signalling until an `fma32` quiets it.
#[inline]
pub(crate) fn fp16_to_f32_bits(h: u16) -> u32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1F);
    let frac = u32::from(h & 0x03FF);
    match exp {
        0x1F => sign | INF | (frac << 13),
        0 if frac == 0 => sign,
        0 => {
            // value = frac * 2^-24 with the top set bit of frac at position p (0..=9):
            // 1.f * 2^(p - 24), biased exponent p - 24 + 127.
            let p = 31 - frac.leading_zeros();
            sign | ((p + 103) << 23) | ((frac << (23 - p)) & FRAC_MASK)
        }
        _ => sign | ((exp + 112) << 23) | (frac << 13),
    }
}

impl Half {
    /// The exact fp32 bit pattern of one element of this format.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    #[inline(always)]
    fn to_f32_bits(self, h: u16) -> u32 {
        match self {
            Half::Bf16 => bf16_to_f32_bits(h),
            Half::Fp16 => fp16_to_f32_bits(h),
        }
    }
}

/// Clamps the operation's shape to the tile so that no path can index outside it.
#[inline]
fn clamp(m_rows: usize, n_dwords: usize, k_dwords: usize) -> (usize, usize, usize) {
    (m_rows.min(ROWS), n_dwords.min(DWORDS), k_dwords.min(ROWS))
}

/// A tile viewed as 16 rows of 16 little-endian dwords.
#[inline]
fn dwords(t: &[u8; 1024]) -> [[u32; DWORDS]; ROWS] {
    let mut out = [[0u32; DWORDS]; ROWS];
    for (row, bytes) in out.iter_mut().zip(t.chunks_exact(64)) {
        for (d, b) in row.iter_mut().zip(bytes.chunks_exact(4)) {
            *d = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    out
}

/// Reads dword `col` of row `row` (both < 16).
#[inline]
fn get_dword(t: &[u8; 1024], row: usize, col: usize) -> u32 {
    let i = (row % ROWS) * 64 + (col % DWORDS) * 4;
    u32::from_le_bytes([t[i], t[i + 1], t[i + 2], t[i + 3]])
}

/// Writes dword `col` of row `row` (both < 16).
#[inline]
fn set_dword(t: &mut [u8; 1024], row: usize, col: usize, v: u32) {
    let i = (row % ROWS) * 64 + (col % DWORDS) * 4;
    t[i..i + 4].copy_from_slice(&v.to_le_bytes());
}

/// Section 10.1: a denormal becomes a zero of the same sign.
#[inline(always)]
fn daz(x: u32) -> u32 {
    if x & EXP_MASK == 0 {
        x & SIGN
    } else {
        x
    }
}

/// True for NaN bit patterns (either sign, quiet or signalling).
#[inline(always)]
fn is_nan(x: u32) -> bool {
    x & !SIGN > INF
}

/// Section 10.2-10.3 for an operation already known to produce a NaN: the first NaN among
/// `x, y, acc`, quieted with sign and payload kept, or the default NaN when none is a NaN (the
/// NaN came from inf*0 or inf-inf).
#[inline]
fn nan_result(x: u32, y: u32, acc: u32) -> u32 {
    if is_nan(x) {
        x | QUIET
    } else if is_nan(y) {
        y | QUIET
    } else if is_nan(acc) {
        acc | QUIET
    } else {
        DEFAULT_NAN
    }
}
