//! AVX2 kernels (x86-64 only), selected at run time by the dispatchers in `super` on CPUs
//! without the AVX-512 ones.
//!
//! * `TDPB[SU][SU]D`: both operands sign- or zero-extended to i16 once per call, then
//!   VPMADDWD (16 exact byte products per instruction, summed in pairs into i32) and VPADDD.
//!   Every extended product fits an i16 x i16 -> i32 multiply, so all four signedness
//!   combinations are the same code with no correction term; the sums wrap mod 2^32.
//! * TDPBF16PS/TDPFP16PS: VFMADD231PS over half rows of C inside one inline-asm block under
//!   MXCSR = DAZ|FTZ|round-to-nearest|all masked, as the AVX-512 kernel does (its module
//!   comment says why that is section 10 exactly for every lane that does not end in a NaN;
//!   NaN lanes are recomputed by the exact model). Used only where the start-up self-check
//!   (`super::daz_ftz_self_check`) shows the CPU's DAZ/FTZ behave as section 10 needs.
//!
//! Register blocking: two rows of C per pass, so each B vector loaded for a k step serves two
//! rows, and 8 independent accumulators per pass (the FMA chains: 2 ports x 4 cycles of
//! latency; the integer chains are VPADDD with a latency of 1, so for them the blocking only
//! keeps loads below the multiply rate).

use core::arch::asm;
use core::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_castps_si256, _mm256_castsi256_ps,
    _mm256_castsi256_si128, _mm256_cmp_ps, _mm256_cvtepi8_epi16, _mm256_cvtepu8_epi16,
    _mm256_cvtph_ps, _mm256_extracti128_si256, _mm256_hadd_epi32, _mm256_loadu_si256,
    _mm256_madd_epi16, _mm256_movemask_ps, _mm256_packus_epi32, _mm256_permute4x64_epi64,
    _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setzero_si256, _mm256_slli_epi32,
    _mm256_srli_epi32, _mm256_storeu_si256, _mm_loadu_si128, _CMP_UNORD_Q,
};
use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;
use core::sync::atomic::{AtomicU8, Ordering};

use super::{exact, get_dword, Half, DWORDS, ROWS};

/// Whether [`dot_int8`] may run on this CPU.
#[inline]
pub(super) fn int8_available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Whether [`dot_half`] may run on this CPU: AVX2, FMA and F16C (every AVX2 CPU to date has
/// all three), and DAZ/FTZ behaving as section 10 needs (checked once per process).
#[inline]
pub(super) fn float_available() -> bool {
    // 0: not checked yet, 1: usable, 2: not usable.
    static STATE: AtomicU8 = AtomicU8::new(0);
    match STATE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let ok = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
                && super::daz_ftz_self_check(|c, a, b, m, n, k| {
                    // SAFETY: AVX2, FMA and F16C were detected just before (`&&`
                    // short-circuits).
                    unsafe { dot_half(c, a, b, m, n, k, Half::Bf16) }
                });
            // Racing threads compute the same answer; storing it twice is harmless.
            STATE.store(if ok { 1 } else { 2 }, Ordering::Relaxed);
            ok
        }
    }
}

/// One tile's rows as 256-bit vectors: row `r` is `[r][0]` and `[r][1]` (16 fp32 or i32
/// lanes), or four vectors of i16 for a widened byte row.
type Rows2 = [[__m256i; 2]; ROWS];
type Rows4 = [[__m256i; 4]; ROWS];

/// Row `r` (< 16) of a tile, bytes `32 * half..32 * half + 32`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load_half_row(t: &[u8; 1024], r: usize, half: usize) -> __m256i {
    let at = (r % ROWS) * 64 + (half % 2) * 32;
    let bytes: &[u8; 32] = t[at..at + 32].try_into().unwrap_or(&[0; 32]);
    // SAFETY: `bytes` is 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) }
}

/// Row `r` (< 16) of a byte tile, sign- (`SIGNED`) or zero-extended to 64 i16 in 4 vectors.
#[inline]
#[target_feature(enable = "avx2")]
fn widen_row<const SIGNED: bool>(t: &[u8; 1024], r: usize) -> [__m256i; 4] {
    let mut out = [_mm256_setzero_si256(); 4];
    for (q, v) in out.iter_mut().enumerate() {
        let at = (r % ROWS) * 64 + q * 16;
        let bytes: &[u8; 16] = t[at..at + 16].try_into().unwrap_or(&[0; 16]);
        // SAFETY: `bytes` is 16 readable bytes; the load is unaligned.
        let x = unsafe { _mm_loadu_si128(bytes.as_ptr().cast()) };
        *v = if SIGNED {
            _mm256_cvtepi8_epi16(x)
        } else {
            _mm256_cvtepu8_epi16(x)
        };
    }
    out
}

/// Writes every row of `t`, extended to i16, into `out`.
#[inline]
#[target_feature(enable = "avx2")]
fn widen_tile<const SIGNED: bool>(t: &[u8; 1024], out: &mut MaybeUninit<Rows4>) {
    let rows = out.as_mut_ptr().cast::<[__m256i; 4]>();
    for r in 0..ROWS {
        // SAFETY: `rows` points to 16 row slots of `out`, and r < 16.
        unsafe { rows.add(r).write(widen_row::<SIGNED>(t, r)) };
    }
}

/// `TDPB[SU][SU]D` with VPMADDWD. For row `m` and k step `k`, the four A bytes of dword
/// `A[m][k]`, extended to i16, are broadcast to every 64-bit lane and multiplied with B row `k`
/// extended to i16: i32 lane `2n + h` of the result is
/// `a[4k+2h] * b[k][4n+2h] + a[4k+2h+1] * b[k][4n+2h+1]`. Summed over k (VPADDD, mod 2^32),
/// lanes `2n` and `2n + 1` hold the two halves of `C[m][n]`'s sum, added at the end
/// (VPHADDD, then a lane permutation back into column order).
///
/// # Safety
/// The CPU must support AVX2.
#[allow(clippy::too_many_arguments)] // the shape of the instruction, as the dispatcher calls it
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_int8(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    a_signed: bool,
    b_signed: bool,
) {
    let shape = super::clamp(m_rows, n_dwords, k_dwords);
    if shape.0 == 0 || shape.1 == 0 {
        return;
    }
    // Signedness as constants, so the extension is one instruction with no branch.
    match (a_signed, b_signed) {
        (true, true) => int8_kernel::<true, true>(c, a, b, shape),
        (true, false) => int8_kernel::<true, false>(c, a, b, shape),
        (false, true) => int8_kernel::<false, true>(c, a, b, shape),
        (false, false) => int8_kernel::<false, false>(c, a, b, shape),
    }
}

/// [`dot_int8`] for one signedness combination; `(m_rows, n_dwords, k_dwords)` clamped and
/// nonempty.
#[inline]
#[target_feature(enable = "avx2")]
fn int8_kernel<const SA: bool, const SB: bool>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
) {
    // Both operands extended once per call (4 KiB, in L1): the hot loop then only loads.
    // All 16 rows whatever the shape (branch-free), written in place without the zeroing an
    // initialised array would cost.
    let mut a_wide = MaybeUninit::<Rows4>::uninit();
    let mut b_wide = MaybeUninit::<Rows4>::uninit();
    widen_tile::<SA>(a, &mut a_wide);
    widen_tile::<SB>(b, &mut b_wide);
    // SAFETY: widen_tile wrote every row.
    let (a_wide, b_wide) = unsafe { (a_wide.assume_init_ref(), b_wide.assume_init_ref()) };
    // A viewed as 16 x 16 quadwords: quadword k of row m is dword A[m][k], extended.
    // SAFETY: [[__m256i; 4]; 16] is 2 KiB of plain integers, readable as 256 u64 (whose
    // alignment it exceeds).
    let a_quads: &[u64; ROWS * DWORDS] = unsafe { &*a_wide.as_ptr().cast() };
    for m0 in (0..m_rows).step_by(2) {
        // Row m0 + 1 may lie past m_rows (at most row 15): computed from the tile's bytes and
        // dropped.
        let rows = [m0, (m0 + 1) % ROWS];
        let mut acc = [_mm256_setzero_si256(); 8];
        for (k, bk) in b_wide.iter().enumerate().take(k_dwords) {
            for (j, &m) in rows.iter().enumerate() {
                // m < 16 and k < 16, so the index is below 256 and needs no check.
                let av = _mm256_set1_epi64x(a_quads[(m % ROWS) * DWORDS + k % DWORDS] as i64);
                for (i, &bv) in bk.iter().enumerate() {
                    let x = &mut acc[j * 4 + i];
                    *x = _mm256_add_epi32(*x, _mm256_madd_epi16(av, bv));
                }
            }
        }
        for (j, &m) in rows.iter().enumerate() {
            if m0 + j >= m_rows {
                break;
            }
            let acc = &acc[j * 4..j * 4 + 4];
            // hadd gives columns [0 1 4 5 | 2 3 6 7]; quadwords (0, 2, 1, 3) put them in order.
            let lo = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(acc[0], acc[1]));
            let hi = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(acc[2], acc[3]));
            let row = [
                _mm256_add_epi32(lo, load_half_row(c, m, 0)),
                _mm256_add_epi32(hi, load_half_row(c, m, 1)),
            ];
            store_row(c, m, n_dwords, row);
        }
    }
}

/// Writes dwords `0..n` (`n <= 16`) of `row` to row `m` of `c`, and nothing else.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn store_row(c: &mut [u8; 1024], m: usize, n: usize, row: [__m256i; 2]) {
    let dst = &mut c[(m % ROWS) * 64..(m % ROWS) * 64 + 64];
    if n >= DWORDS {
        for (half, v) in dst.chunks_exact_mut(32).zip(row) {
            // SAFETY: `half` is 32 writable bytes; the store is unaligned.
            unsafe { _mm256_storeu_si256(half.as_mut_ptr().cast(), v) };
        }
    } else {
        let mut tmp = [0u8; 64];
        for (half, v) in tmp.chunks_exact_mut(32).zip(row) {
            // SAFETY: as above, into the local buffer.
            unsafe { _mm256_storeu_si256(half.as_mut_ptr().cast(), v) };
        }
        dst[..n * 4].copy_from_slice(&tmp[..n * 4]);
    }
}

/// MXCSR inside the floating-point kernel: FTZ (bit 15), round to nearest (bits 14:13 = 0), all
/// six exceptions masked (bits 12:7), DAZ (bit 6), no status flags.
const MXCSR_AMX: u32 = 0x9FC0;

/// The even and odd elements of row `r` of a 16-bit tile as fp32 bit patterns, exactly:
/// `([even 0..8, even 8..16], [odd 0..8, odd 8..16])`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn split_row(t: &[u8; 1024], r: usize, half: Half) -> ([__m256i; 2], [__m256i; 2]) {
    let (x0, x1) = (load_half_row(t, r, 0), load_half_row(t, r, 1));
    match half {
        Half::Bf16 => {
            let hi = _mm256_set1_epi32(0xFFFF_0000_u32 as i32);
            (
                [_mm256_slli_epi32::<16>(x0), _mm256_slli_epi32::<16>(x1)],
                [_mm256_and_si256(x0, hi), _mm256_and_si256(x1, hi)],
            )
        }
        // VCVTPH2PS is exact (fp16 denormals become normal fp32 and are never DAZ'd: DAZ
        // applies to fp32 operands). It quiets signalling NaNs, which does not matter: NaN
        // lanes are recomputed exactly.
        Half::Fp16 => {
            let lo = _mm256_set1_epi32(0xFFFF);
            // packus (per 128-bit lane) then quadwords (0, 2, 1, 3): the 16 halves in order.
            let even = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(
                _mm256_and_si256(x0, lo),
                _mm256_and_si256(x1, lo),
            ));
            let odd = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(
                _mm256_srli_epi32::<16>(x0),
                _mm256_srli_epi32::<16>(x1),
            ));
            (halves_to_f32(even), halves_to_f32(odd))
        }
    }
}

/// 16 fp16 values to 16 fp32 bit patterns, exactly (VCVTPH2PS).
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn halves_to_f32(v: __m256i) -> [__m256i; 2] {
    [
        _mm256_castps_si256(_mm256_cvtph_ps(_mm256_castsi256_si128(v))),
        _mm256_castps_si256(_mm256_cvtph_ps(_mm256_extracti128_si256::<1>(v))),
    ]
}

/// The A operand of a floating-point product converted for [`float_kernel`].
#[repr(C, align(64))]
struct FloatA {
    /// A's even elements: dword k of row m is `ae[m][k]`.
    ae: [[u32; DWORDS]; ROWS],
    /// A's odd elements, 1 KiB after `ae`.
    ao: [[u32; DWORDS]; ROWS],
}

/// The B operand of a floating-point product converted for [`float_kernel`]: row k holds the
/// even elements of columns 0..8, 8..16, then the odd elements of columns 0..8, 8..16 (128
/// bytes per k; aligned for the kernel's aligned loads).
#[repr(C, align(64))]
struct FloatB([[__m256i; 4]; ROWS]);

/// A tile of 16-bit elements as [`FloatA`].
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn convert_a(a: &[u8; 1024], half: Half) -> FloatA {
    let mut ops = MaybeUninit::<FloatA>::uninit();
    let p = ops.as_mut_ptr();
    for r in 0..ROWS {
        let (even, odd) = split_row(a, r, half);
        // SAFETY: `p` points to `ops`, r < 16, and the raw places are written without
        // creating references to the uninitialised memory. The stores are unaligned.
        unsafe {
            let ae = addr_of_mut!((*p).ae[r]).cast::<__m256i>();
            _mm256_storeu_si256(ae, even[0]);
            _mm256_storeu_si256(ae.add(1), even[1]);
            let ao = addr_of_mut!((*p).ao[r]).cast::<__m256i>();
            _mm256_storeu_si256(ao, odd[0]);
            _mm256_storeu_si256(ao.add(1), odd[1]);
        }
    }
    // SAFETY: every field was written above.
    unsafe { ops.assume_init() }
}

/// A tile of 16-bit elements as [`FloatB`].
#[inline]
#[target_feature(enable = "avx2,f16c")]
fn convert_b(b: &[u8; 1024], half: Half) -> FloatB {
    let mut ops = MaybeUninit::<FloatB>::uninit();
    let p = ops.as_mut_ptr().cast::<[__m256i; 4]>();
    for r in 0..ROWS {
        let (even, odd) = split_row(b, r, half);
        // SAFETY: `p` points to the 16 rows of `ops` and r < 16; written in place.
        unsafe { p.add(r).write([even[0], even[1], odd[0], odd[1]]) };
    }
    // SAFETY: every row was written above.
    unsafe { ops.assume_init() }
}

/// TDPBF16PS/TDPFP16PS: per row of C, two fp32 accumulator pairs (te, to over 16 columns)
/// take one VFMADD231PS per k each, then `C + (te + to)`; lanes that end in a NaN are
/// recomputed exactly.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_half(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    let (m_rows, n_dwords, k_dwords) = super::clamp(m_rows, n_dwords, k_dwords);
    if m_rows == 0 || n_dwords == 0 {
        return;
    }
    let (fa, fb) = (convert_a(a, half), convert_b(b, half));
    let pairs = m_rows.div_ceil(2);
    let mut out = MaybeUninit::<Rows2>::uninit();
    // SAFETY: the kernel reads `fa` (ae/ao rows < 2 * pairs <= 16 at dword offsets
    // < k_dwords <= 16), `fb` (rows < k_dwords), c rows < 2 * pairs and writes `out` rows
    // < 2 * pairs, all in bounds; nothing else touches them during the call. The CPU supports
    // AVX2 and FMA (this function's contract).
    unsafe {
        float_kernel(
            &fa,
            &fb,
            k_dwords,
            pairs,
            c.as_ptr(),
            out.as_mut_ptr().cast(),
        )
    };
    let wanted = (1u32 << n_dwords) - 1;
    for m in 0..m_rows {
        // SAFETY: the kernel wrote rows 0..2 * pairs, which include m < m_rows.
        let mut row = unsafe { out.as_ptr().cast::<[__m256i; 2]>().add(m).read() };
        let nan = wanted & nan_lanes(row);
        if nan != 0 {
            row = fix_nan_lanes(row, c, a, b, m, nan, k_dwords, half);
        }
        store_row(c, m, n_dwords, row);
    }
}

/// A 2x2 block of floating-point products over `steps` k-steps (see `super::block`), when no
/// lane of C is a NaN at the end: per step, A0, A1, B0 and B1 converted once each (the
/// instruction by instruction path converts each twice) and the four products run with C
/// updated in place, with no NaN test per row. Returns `false`, with `c` untouched, when a
/// lane ends in a NaN (or a step lies outside the operands): the caller then runs the
/// instructions one by one, whose NaN lanes the exact model recomputes. One test at the end
/// suffices: a NaN lane stays one through every later step, and on the other lanes the kernel
/// is exact (see [`dot_half`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_2x2_half(
    c: &mut [[u8; 1024]; 4],
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    steps: usize,
    half: Half,
) -> bool {
    let mut out = *c;
    for s in 0..steps {
        let (Some(a0), Some(a1), Some(b0), Some(b1)) = (
            super::block::tile(a, a_step, s, 0),
            super::block::tile(a, a_step, s, 1),
            super::block::tile(b, b_step, s, 0),
            super::block::tile(b, b_step, s, 1),
        ) else {
            return false;
        };
        let fa = [convert_a(a0, half), convert_a(a1, half)];
        let fb = [convert_b(b0, half), convert_b(b1, half)];
        for (i, t) in out.iter_mut().enumerate() {
            let p = t.as_mut_ptr();
            // SAFETY: the kernel reads fa/fb (rows < 16, dword offsets < 16) and 16 rows of
            // the tile, which it also writes in place (allowed); nothing else touches them
            // during the call. The CPU supports AVX2 and FMA (this function's contract).
            unsafe { float_kernel(&fa[i / 2], &fb[i % 2], ROWS, ROWS / 2, p, p) };
        }
    }
    let any_nan = out.iter().any(|t| {
        (0..ROWS).any(|r| nan_lanes([load_half_row(t, r, 0), load_half_row(t, r, 1)]) != 0)
    });
    if any_nan {
        return false;
    }
    *c = out;
    true
}

/// Bit `n` set for each of the 16 lanes of `row` that holds a NaN.
#[inline]
#[target_feature(enable = "avx2")]
fn nan_lanes(row: [__m256i; 2]) -> u32 {
    let mask = |v: __m256i| {
        let v = _mm256_castsi256_ps(v);
        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v)) as u32
    };
    mask(row[0]) | (mask(row[1]) << 8)
}

/// Row `m` of the kernel's result with the lanes in `lanes` (those that ended in a NaN)
/// recomputed by the exact model.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
fn fix_nan_lanes(
    row: [__m256i; 2],
    c: &[u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m: usize,
    lanes: u32,
    k_dwords: usize,
    half: Half,
) -> [__m256i; 2] {
    let mut v = [0u32; DWORDS];
    // SAFETY: `v` is 16 writable dwords; the stores are unaligned.
    unsafe {
        _mm256_storeu_si256(v.as_mut_ptr().cast(), row[0]);
        _mm256_storeu_si256(v.as_mut_ptr().add(8).cast(), row[1]);
    }
    for (n, x) in v.iter_mut().enumerate() {
        if lanes & (1 << n) != 0 {
            *x = exact::dot_element(get_dword(c, m, n), a, b, m, n, k_dwords, half);
        }
    }
    // SAFETY: `v` is 16 readable dwords; the loads are unaligned.
    unsafe {
        [
            _mm256_loadu_si256(v.as_ptr().cast()),
            _mm256_loadu_si256(v.as_ptr().add(8).cast()),
        ]
    }
}

/// `pairs` pairs of rows of C: `out[r] = c[r] + (te[r] + to[r])` with
/// `te[r] = sum_k fma(ae[r][k], be[k])` and likewise for `to`, all under [`MXCSR_AMX`].
///
/// The whole computation, MXCSR switch and restore included, is one asm block: the compiler
/// never sees a floating-point operation while MXCSR differs from its default, and the
/// caller's MXCSR (control bits and sticky flags) is restored before the block ends.
///
/// # Safety
/// The CPU must support AVX2 and FMA. `pairs <= 8`, `k <= 16`; `c` points to `2 * pairs`
/// rows of 64 readable bytes and `out` to as many writable ones, not overlapping `fa` or `fb`;
/// `out` may be `c` itself (each row of C is read before the same row of `out` is written, and
/// never after).
#[target_feature(enable = "avx2,fma")]
unsafe fn float_kernel(
    fa: &FloatA,
    fb: &FloatB,
    k: usize,
    pairs: usize,
    c: *const u8,
    out: *mut u8,
) {
    let mut csr = [0u32, MXCSR_AMX];
    // SAFETY: the memory operands are within `fa`, `fb`, `c` and `out` as the caller
    // guarantees (`a` walks ae rows 2p, 2p + 1 and, 1 KiB further, the same ao rows; `b` walks
    // the first k rows of fb, 32-byte aligned); `c == out` is sound as the contract says; `csr` is a live local the block saves MXCSR into and restores it from
    // before exiting; ymm0-15 are declared clobbered, the pointer and counter registers are
    // inout; no stack is used.
    unsafe {
        asm!(
            "vstmxcsr dword ptr [{csr}]",
            "vldmxcsr dword ptr [{csr} + 4]",
            "test {pairs}, {pairs}",
            "jz 5f",
            "4:",
            "vxorps xmm0, xmm0, xmm0",
            "vxorps xmm1, xmm1, xmm1",
            "vxorps xmm2, xmm2, xmm2",
            "vxorps xmm3, xmm3, xmm3",
            "vxorps xmm4, xmm4, xmm4",
            "vxorps xmm5, xmm5, xmm5",
            "vxorps xmm6, xmm6, xmm6",
            "vxorps xmm7, xmm7, xmm7",
            "mov {pa}, {a}",
            "mov {pb}, {b}",
            "mov {kk}, {k}",
            "test {kk}, {kk}",
            "jz 3f",
            "2:",
            "vmovaps ymm8, ymmword ptr [{pb}]",
            "vmovaps ymm9, ymmword ptr [{pb} + 32]",
            "vmovaps ymm10, ymmword ptr [{pb} + 64]",
            "vmovaps ymm11, ymmword ptr [{pb} + 96]",
            "vbroadcastss ymm12, dword ptr [{pa}]",
            "vbroadcastss ymm13, dword ptr [{pa} + 1024]",
            "vfmadd231ps ymm0, ymm12, ymm8",
            "vfmadd231ps ymm1, ymm12, ymm9",
            "vfmadd231ps ymm2, ymm13, ymm10",
            "vfmadd231ps ymm3, ymm13, ymm11",
            "vbroadcastss ymm14, dword ptr [{pa} + 64]",
            "vbroadcastss ymm15, dword ptr [{pa} + 1088]",
            "vfmadd231ps ymm4, ymm14, ymm8",
            "vfmadd231ps ymm5, ymm14, ymm9",
            "vfmadd231ps ymm6, ymm15, ymm10",
            "vfmadd231ps ymm7, ymm15, ymm11",
            "add {pb}, 128",
            "add {pa}, 4",
            "dec {kk}",
            "jnz 2b",
            "3:",
            // te + to, then C + that: the operand order only matters for NaNs, which the
            // caller recomputes exactly.
            "vaddps ymm0, ymm0, ymm2",
            "vaddps ymm0, ymm0, ymmword ptr [{c}]",
            "vmovups ymmword ptr [{out}], ymm0",
            "vaddps ymm1, ymm1, ymm3",
            "vaddps ymm1, ymm1, ymmword ptr [{c} + 32]",
            "vmovups ymmword ptr [{out} + 32], ymm1",
            "vaddps ymm4, ymm4, ymm6",
            "vaddps ymm4, ymm4, ymmword ptr [{c} + 64]",
            "vmovups ymmword ptr [{out} + 64], ymm4",
            "vaddps ymm5, ymm5, ymm7",
            "vaddps ymm5, ymm5, ymmword ptr [{c} + 96]",
            "vmovups ymmword ptr [{out} + 96], ymm5",
            "add {a}, 128",
            "add {c}, 128",
            "add {out}, 128",
            "dec {pairs}",
            "jnz 4b",
            "5:",
            "vldmxcsr dword ptr [{csr}]",
            csr = in(reg) csr.as_mut_ptr(),
            a = inout(reg) (fa as *const FloatA).cast::<u8>() => _,
            b = in(reg) (fb as *const FloatB).cast::<u8>(),
            pa = out(reg) _,
            pb = out(reg) _,
            kk = out(reg) _,
            k = in(reg) k,
            pairs = inout(reg) pairs => _,
            c = inout(reg) c => _,
            out = inout(reg) out => _,
            out("ymm0") _,
            out("ymm1") _,
            out("ymm2") _,
            out("ymm3") _,
            out("ymm4") _,
            out("ymm5") _,
            out("ymm6") _,
            out("ymm7") _,
            out("ymm8") _,
            out("ymm9") _,
            out("ymm10") _,
            out("ymm11") _,
            out("ymm12") _,
            out("ymm13") _,
            out("ymm14") _,
            out("ymm15") _,
            options(nostack),
        );
    }
}
