//! AVX2 kernels (x86-64 only), selected at run time by the dispatchers in `super` on CPUs
//! without the AVX-512 ones.
//!
//! * `TDPB[SU][SU]D`: both operands sign- or zero-extended to i16 once per call, or once per
//!   tile while it is unchanged where the emulator keeps the extended form (`extend`), or once
//!   per block step for a block of products, in another layout (see `dot_2x2_int8`); then
//!   VPMADDWD (16 exact byte products per instruction, summed in pairs into i32) and VPADDD.
//!   Every extended product fits an i16 x i16 -> i32 multiply, so all four signedness
//!   combinations are the same code with no correction term; the sums wrap mod 2^32.
//! * TDPBF16PS/TDPFP16PS: VFMADD231PS over half rows of C inside one inline-asm block under
//!   MXCSR = DAZ|FTZ|round-to-nearest|all masked, as the AVX-512 kernel does (its module
//!   comment says why that is section 10 exactly for every lane that does not end in a NaN;
//!   NaN lanes are recomputed by the exact model). Used only where the start-up self-check
//!   (`super::daz_ftz_self_check`) shows the CPU's DAZ/FTZ behave as section 10 needs.
//!
//! Register blocking: two rows of C per pass for single integer products, four for integer
//! blocks, so each B vector loaded for a k step serves them all, with 8 independent
//! accumulators per pass (the integer chains are VPADDD with a latency of 1, so for them the
//! blocking only keeps loads below the multiply rate). The floating-point kernel runs a group
//! of rows' even and odd sums as two passes, so that its accumulators cover 4 to 6 rows: 6, 5
//! and 5 rows for a whole tile, 10 to 12 FMA chains where 2 ports x 4 cycles of latency need
//! 8 (see `float_kernel`); a block of products widens each step's operands to fp32 inside the
//! kernel during the step before (see `Job`).

use core::arch::asm;
use core::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_broadcastsi128_si256, _mm256_castps_si256,
    _mm256_castsi256_ps, _mm256_castsi256_si128, _mm256_cmp_ps, _mm256_cvtepi8_epi16,
    _mm256_cvtepu8_epi16, _mm256_cvtph_ps, _mm256_extracti128_si256, _mm256_hadd_epi32,
    _mm256_loadu_si256, _mm256_madd_epi16, _mm256_movemask_ps, _mm256_permute4x64_epi64,
    _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setzero_si256, _mm256_shuffle_epi8,
    _mm256_shuffle_ps, _mm256_slli_epi32, _mm256_store_si256, _mm256_storeu_si256, _mm_loadu_si128,
    _mm_set1_epi8, _mm_setr_epi8, _mm_xor_si128, _CMP_UNORD_Q,
};
use core::mem::MaybeUninit;
use core::ptr::addr_of_mut;
use core::sync::atomic::AtomicU8;

use super::block::PreparedTiles;
use super::{exact, get_dword, set_dword, Half, Widened, DWORDS, ROWS};

/// Whether [`dot_int8`] may run on this CPU.
#[inline]
pub(super) fn int8_available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Whether [`dot_half`] may run on this CPU: AVX2, FMA and F16C (every AVX2 CPU to date has
/// all three), and DAZ/FTZ behaving as section 10 needs (checked once per process).
#[inline]
pub(super) fn float_available() -> bool {
    static STATE: AtomicU8 = AtomicU8::new(0);
    super::decided_once(&STATE, || {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
            && super::daz_ftz_self_check(|c, a, b, m, n, k| {
                // SAFETY: AVX2, FMA and F16C were detected just before (`&&` short-circuits).
                unsafe { dot_half(c, a, b, m, n, k, Half::Bf16) }
            })
            // SAFETY: as above.
            && unsafe { fp16_widened_under_daz() }
    })
}

/// Whether the block kernel's and the one-row kernel's own fp16 conversions, which run under
/// [`MXCSR_AMX`] (DAZ set), keep fp16 denormals: a block of two steps whose second step the
/// kernel widens (the first is widened before it), and one product of the one-row kernel, each
/// multiplying the fp16 denormal 2^-24 by 2^15, against the exact model. VCVTPH2PS ignores DAZ on the CPUs documented to date; a CPU that flushed would get
/// 2^-9 instead of 2^-8 and run the portable kernels.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cold]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fp16_widened_under_daz() -> bool {
    let (mut a, mut b) = ([0u8; 2048], [0u8; 2048]);
    let (mut a0, mut b0) = ([0u8; 1024], [0u8; 1024]);
    set_dword(&mut a0, 0, 0, 0x0001); // fp16 2^-24 (denormal), odd element 0
    set_dword(&mut b0, 0, 0, 0x7800); // fp16 2^15
    a[..1024].copy_from_slice(&a0);
    b[..1024].copy_from_slice(&b0);
    let mut want = 0;
    for _ in 0..2 {
        want = exact::dot_element(want, &a0, &b0, 0, 0, 16, Half::Fp16);
    }
    let mut c = [[0u8; 1024]; 4];
    // SAFETY: the CPU supports AVX2, FMA and F16C (this function's contract).
    let done = unsafe { half_block(&mut c, (&a, 0), (&b, 0), 2, Half::Fp16, (None, None)) };
    // The one-row kernel converts under the same MXCSR: one step of the same product.
    let mut row = [0u8; 1024];
    // SAFETY: as above.
    unsafe { half_one_row(&mut row, &a0, &b0, 1, 1, Half::Fp16) };
    let one = exact::dot_element(0, &a0, &b0, 0, 0, 1, Half::Fp16);
    done && get_dword(&c[0], 0, 0) == want && want != 0 && get_dword(&row, 0, 0) == one
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
    // One or two rows of C (a GEMV's edge tiles): extending both whole tiles first would cost
    // more than the products.
    match m_rows {
        1 => return int8_few_rows::<SA, SB, 1>(c, a, b, (n_dwords, k_dwords)),
        2 => return int8_few_rows::<SA, SB, 2>(c, a, b, (n_dwords, k_dwords)),
        _ => {}
    }
    // Both operands extended once per call (4 KiB, in L1): the hot loop then only loads.
    // All 16 rows whatever the shape (branch-free), written in place without the zeroing an
    // initialised array would cost.
    let mut a_wide = MaybeUninit::<Rows4>::uninit();
    let mut b_wide = MaybeUninit::<Rows4>::uninit();
    widen_tile::<SA>(a, &mut a_wide);
    widen_tile::<SB>(b, &mut b_wide);
    // SAFETY: widen_tile wrote every row.
    let (a_wide, b_wide) = unsafe { (a_wide.assume_init_ref(), b_wide.assume_init_ref()) };
    int8_products(c, a_wide, b_wide, (m_rows, n_dwords, k_dwords));
}

/// [`int8_products`] on the first `R` rows of A (`R` = `m_rows`, 1 or 2): only those rows of A
/// are extended, and each row of B is extended in registers as the products read it, never
/// stored. The same arithmetic in the same order, so the same sums.
#[inline]
#[target_feature(enable = "avx2")]
fn int8_few_rows<const SA: bool, const SB: bool, const R: usize>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (n_dwords, k_dwords): (usize, usize),
) {
    // Quadword k of row m: A's dword k extended, as `int8_products` reads it.
    let mut quads = [[0u64; DWORDS]; R];
    for (m, q) in quads.iter_mut().enumerate() {
        for (i, v) in widen_row::<SA>(a, m).into_iter().enumerate() {
            // SAFETY: quadwords 4i..4i + 4 of `q` (i < 4) are 32 writable bytes; the store is
            // unaligned.
            unsafe { _mm256_storeu_si256(q.as_mut_ptr().add(4 * i).cast(), v) };
        }
    }
    let mut acc = [[_mm256_setzero_si256(); 4]; R];
    for k in 0..k_dwords.min(ROWS) {
        let bk = widen_row::<SB>(b, k);
        for (accm, q) in acc.iter_mut().zip(&quads) {
            let av = _mm256_set1_epi64x(q[k % DWORDS] as i64);
            for (x, &bv) in accm.iter_mut().zip(&bk) {
                *x = _mm256_add_epi32(*x, _mm256_madd_epi16(av, bv));
            }
        }
    }
    for (m, accm) in acc.iter().enumerate() {
        add_pair_sums(c, m, n_dwords, accm);
    }
}

/// Adds to row `m` of C (its dwords `0..n_dwords`) the pair sums of [`int8_products`]' four
/// accumulators of that row: dword lanes `2n`, `2n + 1` of them hold the two halves of column
/// `n`'s sum.
#[inline]
#[target_feature(enable = "avx2")]
fn add_pair_sums(c: &mut [u8; 1024], m: usize, n_dwords: usize, acc: &[__m256i; 4]) {
    let [a0, a1, a2, a3] = *acc;
    // hadd gives columns [0 1 4 5 | 2 3 6 7]; quadwords (0, 2, 1, 3) put them in order.
    let lo = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(a0, a1));
    let hi = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(a2, a3));
    let row = [
        _mm256_add_epi32(lo, load_half_row(c, m, 0)),
        _mm256_add_epi32(hi, load_half_row(c, m, 1)),
    ];
    store_row(c, m, n_dwords, row);
}

/// Writes `tile`'s bytes extended to i16 (sign-extended where `signed`) into `out`, as
/// [`dot_int8`] extends its operands: the form [`dot_int8_extended`] reads, which the emulator
/// keeps per tile while the tile is unchanged (`super::extend`).
#[target_feature(enable = "avx2")]
pub(super) fn extend(tile: &[u8; 1024], signed: bool, out: &mut Widened) {
    // SAFETY: a `Widened` is 2048 bytes aligned to 64, room for a `Rows4` (2048 bytes, aligned
    // to 32) of plain integers, which `widen_tile` writes in full.
    let rows = unsafe { &mut *(out as *mut Widened).cast::<MaybeUninit<Rows4>>() };
    match signed {
        true => widen_tile::<true>(tile, rows),
        false => widen_tile::<false>(tile, rows),
    }
}

/// [`dot_int8`] on operands already extended (`aw`, `bw`, from [`extend`] of A and B with
/// their signedness): the arithmetic without the extension, for operands the emulator keeps
/// extended while their tiles are unchanged.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_int8_extended(
    c: &mut [u8; 1024],
    aw: &Widened,
    bw: &Widened,
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
) {
    let shape = super::clamp(m_rows, n_dwords, k_dwords);
    if shape.0 == 0 || shape.1 == 0 {
        return;
    }
    // SAFETY: a `Widened` is 2048 bytes of plain data aligned to 64, and every bit pattern is
    // a valid `Rows4` (2048 bytes of integers, aligned to 32). (That they hold the extended
    // tiles, from `extend`, is what makes the result right, not what makes the read sound.)
    let (a_wide, b_wide) = unsafe {
        (
            &*(aw as *const Widened).cast::<Rows4>(),
            &*(bw as *const Widened).cast::<Rows4>(),
        )
    };
    int8_products(c, a_wide, b_wide, shape);
}

/// The products of [`dot_int8`] on the extended operands; `(m_rows, n_dwords, k_dwords)`
/// clamped and nonempty.
#[inline]
#[target_feature(enable = "avx2")]
fn int8_products(
    c: &mut [u8; 1024],
    a_wide: &Rows4,
    b_wide: &Rows4,
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
) {
    // A viewed as 16 x 16 quadwords: quadword k of row m is dword A[m][k], extended.
    // SAFETY: [[__m256i; 4]; 16] is 2 KiB of plain integers, readable as 256 u64 (whose
    // alignment it exceeds).
    let a_quads: &[u64; ROWS * DWORDS] = unsafe { &*a_wide.as_ptr().cast() };
    for m0 in (0..m_rows).step_by(2) {
        // Row m0 + 1 may lie past m_rows (at most row 15): computed from the tile's bytes and
        // dropped.
        let rows = [m0, (m0 + 1) % ROWS];
        let mut acc = [[_mm256_setzero_si256(); 4]; 2];
        for (k, bk) in b_wide.iter().enumerate().take(k_dwords) {
            for (accm, &m) in acc.iter_mut().zip(&rows) {
                // m < 16 and k < 16, so the index is below 256 and needs no check.
                let av = _mm256_set1_epi64x(a_quads[(m % ROWS) * DWORDS + k % DWORDS] as i64);
                for (x, &bv) in accm.iter_mut().zip(bk) {
                    *x = _mm256_add_epi32(*x, _mm256_madd_epi16(av, bv));
                }
            }
        }
        for (j, &m) in rows.iter().enumerate() {
            if m0 + j >= m_rows {
                break;
            }
            add_pair_sums(c, m, n_dwords, &acc[j]);
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
            // Per 128-bit lane the even halves, then the odd ones ([`FP16_SPLIT`]); then
            // quadwords (0, 2, 1, 3): a half row's 8 even halves low, its 8 odd ones high.
            let split = _mm256_broadcastsi128_si256(_mm_setr_epi8(
                0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
            ));
            let sort = |x| _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(x, split));
            let ([e0, o0], [e1, o1]) = (halves_to_f32(sort(x0)), halves_to_f32(sort(x1)));
            ([e0, e1], [o0, o1])
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

/// Writes `t`'s 16-bit elements as fp32, exactly, into `out`: row `r` of `even` (`odd`)
/// holds the even (odd) elements of row `r`'s 16 dwords ([`Widened`], the form both operands
/// of [`float_kernel`] take, and the one the emulator keeps per tile while it is unchanged).
///
/// # Safety
/// The CPU must support AVX2 and F16C; `out` points to a writable [`Widened`].
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn widen_into(t: &[u8; 1024], half: Half, out: *mut Widened) {
    // SAFETY: the caller's contract.
    unsafe { widen_rows_into::<ROWS>(t, half, out) }
}

/// [`widen_into`] for rows `0..N` only (`N <= 16`, a constant: with a bound known only at run
/// time the GEMM at M = 16, whose row kernel widens whole tiles through [`widen_into`], was
/// about 10% slower, bf16 16 x 4096 x 4096 on a Zen 4-class core); the others of `out` are
/// left as they are.
///
/// # Safety
/// As [`widen_into`].
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn widen_rows_into<const N: usize>(t: &[u8; 1024], half: Half, out: *mut Widened) {
    for r in 0..N.min(ROWS) {
        let (even, odd) = split_row(t, r, half);
        // SAFETY: row r < 16 of each 1024-byte half of `*out` (the contract), written through
        // raw places; `Widened` is 64-byte aligned and its rows 64 bytes, so the stores are
        // aligned.
        unsafe {
            let e = addr_of_mut!((*out).even).cast::<__m256i>().add(2 * r);
            _mm256_store_si256(e, even[0]);
            _mm256_store_si256(e.add(1), even[1]);
            let o = addr_of_mut!((*out).odd).cast::<__m256i>().add(2 * r);
            _mm256_store_si256(o, odd[0]);
            _mm256_store_si256(o.add(1), odd[1]);
        }
    }
}

/// [`widen_into`] for the emulator's per-tile cache (`super::widen`).
#[target_feature(enable = "avx2,f16c")]
pub(super) fn widen(tile: &[u8; 1024], half: Half, out: &mut Widened) {
    // SAFETY: `out` is a live, writable `Widened`; the CPU has AVX2 and F16C (this function's
    // target features, which its callers check).
    unsafe { widen_into(tile, half, out) }
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
    if m_rows == 0 || n_dwords == 0 {
        return;
    }
    if m_rows == 1 {
        // A GEMV's tiles: B's rows are read once, so they are converted in registers.
        // SAFETY: the CPU supports AVX2, FMA and F16C (this function's contract).
        unsafe { half_one_row(c, a, b, n_dwords, k_dwords, half) };
        return;
    }
    let mut aw = MaybeUninit::<Widened>::uninit();
    let mut bw = MaybeUninit::<Widened>::uninit();
    // In checked builds the rows of A left unwritten hold finite values (0x41 bytes, about
    // 12.0), so that a kernel reading one gives wrong sums, which the start-up self-check and
    // the tests see (a stale widening of the same tile, or NaNs, which the exact recomputation
    // repairs, would hide it).
    #[cfg(debug_assertions)]
    // SAFETY: `aw` is a live `Widened` of plain bytes.
    unsafe {
        aw.as_mut_ptr().write_bytes(0x41, 1)
    };
    // SAFETY: both point to live `Widened`s; B is written in full, A in the rows the kernel
    // reads (its groups of 4 rows: see `half_products`), before they are read (a GEMV's edge
    // tiles have 1 row: widening all 16 would cost more than the products). The CPU supports
    // AVX2, FMA and F16C (this function's contract).
    unsafe {
        // The kernel's groups of 4 rows that hold A's first `m_rows`.
        match m_rows.div_ceil(FLOAT_GROUP) {
            1 => widen_rows_into::<4>(a, half, aw.as_mut_ptr()),
            2 => widen_rows_into::<8>(a, half, aw.as_mut_ptr()),
            3 => widen_rows_into::<12>(a, half, aw.as_mut_ptr()),
            _ => widen_rows_into::<ROWS>(a, half, aw.as_mut_ptr()),
        }
        widen_into(b, half, bw.as_mut_ptr());
        half_products(
            c,
            (a, aw.as_ptr()),
            (b, bw.as_ptr()),
            (m_rows, n_dwords, k_dwords),
            half,
        )
    }
}

/// The asm of [`half_one_row`]: `$lo` and `$hi` turn B's row k, columns 0-7 in ymm4 and 8-15
/// in ymm5, into their even elements in ymm8 and their odd ones in ymm4 / ymm5 (fp32), and
/// run the row's FMAs; ymm9 holds the bf16 odd mask, ymm10 [`FP16_SPLIT`] in both lanes.
macro_rules! one_row_asm {
    ($csr:expr, $b:expr, $ae:expr, $ao:expr, $k:expr, $c:expr, $out:expr;
     [$($lo:literal),+] [$($hi:literal),+]) => {
        asm!(
            "vstmxcsr dword ptr [{csr}]",
            "vldmxcsr dword ptr [{csr} + 4]",
            "vpbroadcastd ymm9, dword ptr [{csr} + 8]",
            "vbroadcasti128 ymm10, xmmword ptr [{split}]",
            "vxorps xmm0, xmm0, xmm0",
            "vxorps xmm1, xmm1, xmm1",
            "vxorps xmm2, xmm2, xmm2",
            "vxorps xmm3, xmm3, xmm3",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "vmovdqu ymm4, ymmword ptr [{b}]",
            "vmovdqu ymm5, ymmword ptr [{b} + 32]",
            "vbroadcastss ymm6, dword ptr [{ae}]",
            "vbroadcastss ymm7, dword ptr [{ao}]",
            $($lo,)+
            "vfmadd231ps ymm0, ymm8, ymm6",
            "vfmadd231ps ymm2, ymm4, ymm7",
            $($hi,)+
            "vfmadd231ps ymm1, ymm8, ymm6",
            "vfmadd231ps ymm3, ymm5, ymm7",
            "add {b}, 64",
            "add {ae}, 4",
            "add {ao}, 4",
            "dec {n}",
            "jnz 2b",
            "3:",
            "vaddps ymm0, ymm0, ymm2",
            "vaddps ymm1, ymm1, ymm3",
            "vaddps ymm0, ymm0, ymmword ptr [{c}]",
            "vaddps ymm1, ymm1, ymmword ptr [{c} + 32]",
            "vmovups ymmword ptr [{out}], ymm0",
            "vmovups ymmword ptr [{out} + 32], ymm1",
            "vldmxcsr dword ptr [{csr}]",
            csr = in(reg) $csr,
            split = in(reg) FP16_SPLIT.0.as_ptr(),
            b = inout(reg) $b => _,
            ae = inout(reg) $ae => _,
            ao = inout(reg) $ao => _,
            n = inout(reg) $k => _,
            c = in(reg) $c,
            out = in(reg) $out,
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
            options(nostack),
        )
    };
}

/// [`dot_half`] with one row of A (a GEMV's tiles): B's rows converted in registers as the
/// kernel reads them, each once, where the group kernel converts all 16 into memory first and
/// computes a group of 4 rows. Per k, the same FMAs on the same values in the same order as
/// [`float_kernel`] for row 0, so the same bits. fp16's VCVTPH2PS runs under the kernel's
/// MXCSR, as in the block kernel, which DAZ does not affect (checked at start-up:
/// [`fp16_widened_under_daz`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_one_row(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    let (_, n_dwords, k_dwords) = super::clamp(1, n_dwords, k_dwords);
    if n_dwords == 0 {
        return;
    }
    // A's row 0 converted: the elements the kernel broadcasts, even then odd.
    let (even, odd) = split_row(a, 0, half);
    let mut ae = [0f32; 16];
    let mut ao = [0f32; 16];
    // SAFETY: `ae` and `ao` are 64 writable bytes each; the stores are unaligned.
    unsafe {
        _mm256_storeu_si256(ae.as_mut_ptr().cast(), even[0]);
        _mm256_storeu_si256(ae.as_mut_ptr().add(8).cast(), even[1]);
        _mm256_storeu_si256(ao.as_mut_ptr().cast(), odd[0]);
        _mm256_storeu_si256(ao.as_mut_ptr().add(8).cast(), odd[1]);
    }
    let mut out = [0u32; 16];
    // MXCSR saved, MXCSR in the kernel, and the mask of a dword's odd bf16.
    let mut csr = [0u32, MXCSR_AMX, 0xFFFF_0000];
    let csr = csr.as_mut_ptr();
    let (bp, aep, aop, cp, outp) = (
        b.as_ptr(),
        ae.as_ptr(),
        ao.as_ptr(),
        c.as_ptr(),
        out.as_mut_ptr(),
    );
    // SAFETY: the block reads B's rows 0..k_dwords (k_dwords <= 16, 64 bytes each, inside
    // `b`), dwords 0..k_dwords of `ae` and `ao`, C's row 0, the 3 dwords of `csr` and the 16
    // bytes of the static `FP16_SPLIT`, and writes the 64 bytes of `out` and `csr`'s first
    // dword, all live locals or borrowed; it saves MXCSR and restores it before exiting, so no
    // floating-point operation of the compiler's runs under MXCSR_AMX. ymm0-ymm10 are
    // declared clobbered, the pointers and counter are inout; no stack is used. The CPU
    // supports AVX2, FMA and F16C (this function's contract).
    unsafe {
        match half {
            // The even bf16 of each dword shifted up, the odd one masked: exact.
            Half::Bf16 => one_row_asm!(csr, bp, aep, aop, k_dwords, cp, outp;
                ["vpslld ymm8, ymm4, 16", "vpand ymm4, ymm4, ymm9"]
                ["vpslld ymm8, ymm5, 16", "vpand ymm5, ymm5, ymm9"]),
            // The 8 even halves gathered low and the 8 odd ones high (VPSHUFB per lane, then
            // VPERMQ), each 8 converted: as `split_row` does.
            Half::Fp16 => one_row_asm!(csr, bp, aep, aop, k_dwords, cp, outp;
            [
                "vpshufb ymm4, ymm4, ymm10",
                "vpermq ymm4, ymm4, 0xD8",
                "vcvtph2ps ymm8, xmm4",
                "vextracti128 xmm4, ymm4, 1",
                "vcvtph2ps ymm4, xmm4"
            ]
            [
                "vpshufb ymm5, ymm5, ymm10",
                "vpermq ymm5, ymm5, 0xD8",
                "vcvtph2ps ymm8, xmm5",
                "vextracti128 xmm5, ymm5, 1",
                "vcvtph2ps ymm5, xmm5"
            ]),
        }
    };
    // SAFETY: `out` is 64 readable bytes; the loads are unaligned.
    let mut row = unsafe {
        [
            _mm256_loadu_si256(out.as_ptr().cast()),
            _mm256_loadu_si256(out.as_ptr().add(8).cast()),
        ]
    };
    let nan = ((1u32 << n_dwords) - 1) & nan_lanes(row);
    if nan != 0 {
        row = fix_nan_lanes(row, c, a, b, 0, nan, k_dwords, half);
    }
    store_row(c, 0, n_dwords, row);
}

/// [`dot_half`] with A and B already widened (`aw`, `bw`, from [`widen`] of `a` and `b`): the
/// arithmetic without the conversion, for operands the emulator keeps widened while their
/// tiles are unchanged. `a` and `b` are still read for the lanes that end in a NaN.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_half_widened(
    c: &mut [u8; 1024],
    (a, aw): (&[u8; 1024], &Widened),
    (b, bw): (&[u8; 1024], &Widened),
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    // SAFETY: both widened tiles are live and written in full; the CPU supports AVX2, FMA and
    // F16C (this function's contract).
    unsafe { half_products(c, (a, aw), (b, bw), (m_rows, n_dwords, k_dwords), half) }
}

/// [`dot_half_widened`] on widened tiles given as pointers: A's need only its rows below
/// `m_rows` rounded up to a multiple of 4 written, B's its rows below `k_dwords`.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `aw` and `bw` point to live [`Widened`] whose
/// rows above are written (both halves, `even` and `odd`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_products(
    c: &mut [u8; 1024],
    (a, aw): (&[u8; 1024], *const Widened),
    (b, bw): (&[u8; 1024], *const Widened),
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    half: Half,
) {
    let (m_rows, n_dwords, k_dwords) = super::clamp(m_rows, n_dwords, k_dwords);
    if m_rows == 0 || n_dwords == 0 {
        return;
    }
    let groups = m_rows.div_ceil(FLOAT_GROUP);
    let mut out = MaybeUninit::<Rows2>::uninit();
    let job = Job {
        a: aw.cast(),
        b: bw.cast(),
        c: c.as_ptr(),
        out: out.as_mut_ptr().cast(),
        ..NO_JOB
    };
    // SAFETY: the kernel reads `aw` (rows < 4 * groups <= 16 at dword offsets < k_dwords <= 16),
    // `bw` (rows < k_dwords), all written (the contract), c rows < 4 * groups and writes `out`
    // rows < 4 * groups, all in bounds and 32-byte aligned where it loads aligned (`Widened`
    // is 64-byte aligned); nothing else touches them during the call. The CPU supports AVX2
    // and FMA (this function's contract).
    unsafe { float_kernel(&[job], k_dwords, groups, half) };
    let wanted = (1u32 << n_dwords) - 1;
    for m in 0..m_rows {
        // SAFETY: the kernel wrote rows 0..4 * groups, which include m < m_rows.
        let mut row = unsafe { out.as_ptr().cast::<[__m256i; 2]>().add(m).read() };
        let nan = wanted & nan_lanes(row);
        if nan != 0 {
            row = fix_nan_lanes(row, c, a, b, m, nan, k_dwords, half);
        }
        store_row(c, m, n_dwords, row);
    }
}

/// A 2x2 block of floating-point products over `steps` k-steps (see `super::block`), when no
/// lane of C is a NaN at the end: per step, A0, A1, B0 and B1 widened once each (the
/// instruction by instruction path widens each twice), by the kernel itself while it computes
/// the step before (see [`Job`]), and each step's products run by one kernel call, with C
/// updated in place and no NaN test per row. Returns `false`, with `c` untouched, when a lane
/// ends in a NaN (or a step lies outside the operands): the caller then runs the
/// instructions one by one, whose NaN lanes the exact model recomputes. One test at the end suffices: a NaN lane stays one through every later
/// step, and on the other lanes the kernel is exact (see [`dot_half`]).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_2x2_half(
    c: &mut [[u8; 1024]; 4],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    half: Half,
) -> bool {
    // SAFETY: forwarded from this function's contract.
    unsafe { half_block(c, a, b, steps, half, (None, None)) }
}

/// [`dot_2x2_half`] with A's tiles, B's or both read already widened from `prepared` (tile
/// `h` of step `s` is `prepared.0.tile(s, h)` for A, `prepared.1.tile(s, h)` for B), so that
/// only the others are widened per step. Each prepared operand must hold those tiles of `a` or
/// `b` widened as `half` (the products are then bit for bit those of [`dot_2x2_half`]); `a` and
/// `b` are still read to recompute NaN lanes. Returns `false`, with `c` untouched, where
/// [`dot_2x2_half`] does or a prepared tile is missing.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_2x2_half_prepared(
    c: &mut [[u8; 1024]; 4],
    a: (&[u8], usize),
    b: (&[u8], usize),
    prepared: (
        Option<super::block::PreparedTiles<'_>>,
        Option<super::block::PreparedTiles<'_>>,
    ),
    steps: usize,
    half: Half,
) -> bool {
    // SAFETY: forwarded from this function's contract.
    unsafe { half_block(c, a, b, steps, half, prepared) }
}

/// [`dot_2x2_half`] on one row of tiles: `C[w] += A x Bw` for `w` in 0, 1 and each step in
/// order, A's step one tile at `s * a_step`, B's two. A is widened once for both products (the
/// instruction-by-instruction path widens it for each). Returns `false`, with `c` untouched, as
/// [`dot_2x2_half`] does.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_1x2_half(
    c: &mut [[u8; 1024]; 2],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    half: Half,
) -> bool {
    // SAFETY: forwarded from this function's contract.
    unsafe { half_block(c, a, b, steps, half, (None, None)) }
}

/// [`dot_2x2_half`] (4 C tiles) or [`dot_1x2_half`] (2): tile `2h + w` of `c` is A's tile h
/// times B's tile w, for the `c.len() / 2` rows of tiles; A's and B's tiles widened here, or
/// read from `prepared` (A's, B's).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `c.len()` is 2 or 4.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_block(
    c: &mut [[u8; 1024]],
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    steps: usize,
    half: Half,
    (prepared, prepared_b): (
        Option<super::block::PreparedTiles<'_>>,
        Option<super::block::PreparedTiles<'_>>,
    ),
) -> bool {
    let tiles = c.len().min(4);
    let heights = tiles / 2;
    let mut out = [[0u8; 1024]; 4];
    out[..tiles].copy_from_slice(&c[..tiles]);
    let base = out.as_mut_ptr().cast::<u8>();
    // A step's operand tiles to widen: A's `heights` tiles, then B0 and B1 (none of an operand
    // that comes prepared; `None` past the operands).
    let step_tiles = |s: usize| -> Option<[Option<&[u8; 1024]>; 4]> {
        let mut t = [None; 4];
        for (h, slot) in t.iter_mut().take(heights).enumerate() {
            let tile = super::block::tile(a, a_step, s, h)?;
            if prepared.is_none() {
                *slot = Some(tile);
            }
        }
        for w in 0..2 {
            let tile = super::block::tile(b, b_step, s, w)?;
            if prepared_b.is_none() {
                t[heights + w] = Some(tile);
            }
        }
        Some(t)
    };
    if steps == 0 {
        return true;
    }
    // The widened tiles of two steps: slot `4 * (s % 2) + i` holds tile i of step s's
    // `step_tiles`. The kernel reads step s's slots and widens step s + 1 into the others.
    let mut ring = MaybeUninit::<[Widened; 8]>::uninit();
    let ring = ring.as_mut_ptr().cast::<Widened>();
    let slot = |s: usize, i: usize| ring.wrapping_add(4 * (s % 2) + i);
    let Some(first) = step_tiles(0) else {
        return false;
    };
    for (i, t) in first.iter().enumerate() {
        if let Some(t) = t {
            // SAFETY: slot i < 4 of parity 0 lies in `ring`; the CPU supports AVX2 and F16C
            // (this function's contract).
            unsafe { widen_into(t, half, slot(0, i)) };
        }
    }
    for s in 0..steps {
        // B's lines of a step ahead, into L2: this call widens step s + 1's tiles, so the
        // one after it is the next whose B is not yet on its way (see
        // `super::block::prefetch_b_step`). One step per kernel call, so that the prefetches
        // spread over the k-loop (a call per 8 steps, with the next 8 steps' lines asked for
        // at once into L2, was 0.67x as fast at M = 16, where B streams from memory; an MXCSR
        // switch per step costs nothing measurable). A prepared B is read from the prepared
        // tiles instead.
        if prepared_b.is_none() {
            super::block::prefetch_b_step(b, b_step, s + 1 + super::block::B_LEAD);
        }
        let next = match s + 1 < steps {
            true => match step_tiles(s + 1) {
                Some(next) => next,
                None => return false,
            },
            false => [None; 4],
        };
        // The next step's tiles, one per job (the row block's third on its first job).
        let widen = |i: usize| match next.get(i).copied().flatten() {
            Some(t) => ToWiden {
                tile: t.as_ptr(),
                into: slot(s + 1, i).cast(),
            },
            None => NOTHING,
        };
        let mut jobs = [NO_JOB; 4];
        for (t, job) in jobs.iter_mut().enumerate().take(tiles) {
            // In step order for each tile of C, as the instructions run.
            let second = if t == 0 && tiles == 2 { 2 } else { 4 };
            // A missing prepared tile declines the block: `c` is still untouched.
            let a = match &prepared {
                Some(p) => match p.tile(s, t / 2) {
                    Some(w) => w as *const Widened,
                    None => return false,
                },
                None => slot(s, t / 2).cast_const(),
            };
            let b = match &prepared_b {
                Some(p) => match p.tile(s, t % 2) {
                    Some(w) => w as *const Widened,
                    None => return false,
                },
                None => slot(s, heights + t % 2).cast_const(),
            };
            *job = Job {
                a: a.cast(),
                b: b.cast(),
                c: base.wrapping_add(t * 1024),
                out: base.wrapping_add(t * 1024),
                widen: [widen(t), widen(second)],
            };
        }
        // SAFETY: every job names two widened operands of step s, written by `widen_into`
        // (step 0) or by the jobs of the step before, or prepared tiles, borrowed for the
        // call and written by no one, and a tile of `out`, read then written in place
        // (allowed), 16 rows and 16 k steps; it widens tiles of step s + 1, inside `a` and `b`
        // (`step_tiles` checked them), into that step's slots, which no job of step s reads;
        // nothing else touches them during the call. The CPU supports AVX2, FMA and F16C
        // (this function's contract).
        unsafe { float_kernel(&jobs[..tiles], ROWS, ROWS / FLOAT_GROUP, half) };
    }
    let any_nan = out[..tiles].iter().any(|t| {
        (0..ROWS).any(|r| nan_lanes([load_half_row(t, r, 0), load_half_row(t, r, 1)]) != 0)
    });
    if any_nan {
        return false;
    }
    c[..tiles].copy_from_slice(&out[..tiles]);
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

/// One product for [`float_kernel`]: A and B widened ([`Widened`], 64-byte aligned), the rows
/// of C it reads and of the result it writes (`out` may be `c`), and up to two tiles to widen
/// meanwhile, `(tile, into)` (the tile's 1024 bytes, a [`Widened`] to write; a null tile for
/// none).
///
/// A block kernel widens each step's operand tiles during the step before: each job widens
/// one (the third of a row block's three on its first job), a third of its rows after each
/// group of rows of its product, so that the conversion's stores overlap the FMAs. Widened
/// apart, between kernel calls, they did not: on a Zen 4-class core the bf16 GEMM spent 15%
/// of its time in the conversion, and the emulated bf16 and fp16 GEMMs run 4-5% faster with
/// it inside the kernel (1024^3, both ways alternating in one process).
#[derive(Clone, Copy)]
#[repr(C)]
struct Job {
    a: *const u8,
    b: *const u8,
    c: *const u8,
    out: *mut u8,
    widen: [ToWiden; 2],
}

/// A tile for a [`Job`] to widen (none when `tile` is null) and the [`Widened`] it goes to.
#[derive(Clone, Copy)]
#[repr(C)]
struct ToWiden {
    tile: *const u8,
    into: *mut u8,
}

/// No tile to widen.
const NOTHING: ToWiden = ToWiden {
    tile: core::ptr::null(),
    into: core::ptr::null_mut(),
};

/// A job with nothing in it, for the unused entries of an array of jobs.
const NO_JOB: Job = Job {
    a: core::ptr::null(),
    b: core::ptr::null(),
    c: core::ptr::null(),
    out: core::ptr::null_mut(),
    widen: [NOTHING; 2],
};

/// What [`float_kernel`]'s asm block reads and writes beside the jobs: MXCSR's save slot, the
/// value it runs under, k, the groups of rows, and where a group's even sums wait for the odd
/// ones (up to 6 rows of 64 bytes).
#[repr(C, align(32))]
struct Frame {
    saved: u32,
    amx: u32,
    k: usize,
    groups: usize,
    _pad: usize,
    te: [[u8; 64]; 6],
}

/// Rows of C per group of [`float_kernel`] for a part of a tile; a whole tile runs as groups
/// of 6, 5 and 5 rows.
const FLOAT_GROUP: usize = 4;

/// One group of rows of [`float_kernel`] (asm text): the group's bytes (64 per row), then for
/// each row `(offset, acc0, acc1)`, its byte offset from the group's first row and the two
/// accumulators (ymm numbers) of its 16 lanes.
///
/// The even sums run first: the accumulators zeroed, then per k step 2 vectors of B at `pb`
/// (ymm12, ymm13: the 16 columns) and each row's broadcast dword of A (ymm14) into 2 FMAs; `pa`
/// += 4, `pb` += 64 per step. They are set aside in `Frame::te` while the odd sums run the
/// same way, 1 KiB further into both widened operands; then `out = c + (to + te)` row by row,
/// and `a`, `c` and `out` move past the group's rows.
///
/// Per k step that is 2 + rows loads for 2 * rows FMAs. The FMAs of one accumulator depend on
/// each other (4 cycles apart on current cores, at 2 FMAs per cycle), so the 8 chains of 4 rows
/// exactly cover the latency and any late operand stalls the pipe; 10 or 12 chains leave room.
/// On a Zen 4-class core a 2x2 block runs 8-12% faster as 6 + 5 + 5 rows than as 4 x 4 while
/// another thread shares the core, and 1-2% faster when none does (alternating in one
/// process).
macro_rules! float_group {
    ($bytes:literal; $(($off:literal, $c0:literal, $c1:literal)),+) => {
        concat!(
            "mov {pa}, {a}\n",
            "mov {pb}, {b}\n",
            float_group!(@pass $(($off, $c0, $c1)),+),
            $(
                "vmovaps ymmword ptr [{f} + 32 + ", $off, "], ymm", $c0, "\n",
                "vmovaps ymmword ptr [{f} + 32 + ", $off, " + 32], ymm", $c1, "\n",
            )+
            "lea {pa}, [{a} + 1024]\n",
            "lea {pb}, [{b} + 1024]\n",
            float_group!(@pass $(($off, $c0, $c1)),+),
            $(
                "vaddps ymm", $c0, ", ymm", $c0, ", ymmword ptr [{f} + 32 + ", $off, "]\n",
                "vaddps ymm", $c0, ", ymm", $c0, ", ymmword ptr [{c} + ", $off, "]\n",
                "vmovups ymmword ptr [{out} + ", $off, "], ymm", $c0, "\n",
                "vaddps ymm", $c1, ", ymm", $c1, ", ymmword ptr [{f} + 32 + ", $off, " + 32]\n",
                "vaddps ymm", $c1, ", ymm", $c1, ", ymmword ptr [{c} + ", $off, " + 32]\n",
                "vmovups ymmword ptr [{out} + ", $off, " + 32], ymm", $c1, "\n",
            )+
            "add {a}, ", $bytes, "\n",
            "add {c}, ", $bytes, "\n",
            "add {out}, ", $bytes, "\n",
        )
    };
    (@pass $(($off:literal, $c0:literal, $c1:literal)),+) => {
        concat!(
            $(
                "vxorps xmm", $c0, ", xmm", $c0, ", xmm", $c0, "\n",
                "vxorps xmm", $c1, ", xmm", $c1, ", xmm", $c1, "\n",
            )+
            "mov {kk}, qword ptr [{f} + 8]\n",
            "test {kk}, {kk}\n",
            "jz 3f\n",
            "2:\n",
            "vmovaps ymm12, ymmword ptr [{pb}]\n",
            "vmovaps ymm13, ymmword ptr [{pb} + 32]\n",
            $(
                "vbroadcastss ymm14, dword ptr [{pa} + ", $off, "]\n",
                "vfmadd231ps ymm", $c0, ", ymm14, ymm12\n",
                "vfmadd231ps ymm", $c1, ", ymm14, ymm13\n",
            )+
            "add {pb}, 64\n",
            "add {pa}, 4\n",
            "dec {kk}\n",
            "jnz 2b\n",
            "3:\n",
        )
    };
}

/// The conversion of [`widen_into`] for the rows at byte offsets `$off` of a job's tiles to
/// widen (asm text): for each of the job's two `(tile, into)` pairs whose tile is not null,
/// each row's 16 dwords split into even and odd elements as fp32, stored at the same offset
/// of `into`'s `even` and 1 KiB further (`odd`). `$row` converts one row (`widen_bf16_row!`
/// or `widen_fp16_row!`, with ymm15 holding the mask they need); ymm0-3 and `pa`, `pb` are
/// scratch (free between groups).
macro_rules! widen_rows {
    ($row:ident; $($off:literal),+) => {
        concat!(
            widen_rows!(@tile $row; 32; $($off),+),
            widen_rows!(@tile $row; 48; $($off),+),
        )
    };
    (@tile $row:ident; $at:literal; $($off:literal),+) => {
        concat!(
            "mov {pa}, qword ptr [{jobs} + ", $at, "]\n",
            "test {pa}, {pa}\n",
            "jz 8f\n",
            "mov {pb}, qword ptr [{jobs} + ", $at, " + 8]\n",
            $($row!($off),)+
            "8:\n",
        )
    };
}

/// One bf16 row of [`widen_rows!`]: even elements shifted into the high half of their dword
/// (VPSLLD), odd ones kept there with the low half cleared (VPAND with ymm15 = `0xFFFF0000`
/// per dword), as `split_row` does.
macro_rules! widen_bf16_row {
    ($off:literal) => {
        concat!(
            "vpslld ymm0, ymmword ptr [{pa} + ",
            $off,
            "], 16\n",
            "vpslld ymm1, ymmword ptr [{pa} + ",
            $off,
            " + 32], 16\n",
            "vpand ymm2, ymm15, ymmword ptr [{pa} + ",
            $off,
            "]\n",
            "vpand ymm3, ymm15, ymmword ptr [{pa} + ",
            $off,
            " + 32]\n",
            "vmovaps ymmword ptr [{pb} + ",
            $off,
            "], ymm0\n",
            "vmovaps ymmword ptr [{pb} + ",
            $off,
            " + 32], ymm1\n",
            "vmovaps ymmword ptr [{pb} + 1024 + ",
            $off,
            "], ymm2\n",
            "vmovaps ymmword ptr [{pb} + 1024 + ",
            $off,
            " + 32], ymm3\n",
        )
    };
}

/// One fp16 row of [`widen_rows!`], as `split_row` does it: in each half row (8 dwords), the
/// 8 even (low) and 8 odd (high) halves gathered per 128-bit lane (VPSHUFB with ymm15 =
/// [`FP16_SPLIT`] in both lanes), the lanes' quadwords put in order (VPERMQ: the 8 even halves
/// in the low 128 bits, the 8 odd ones in the high), and each 8 converted by VCVTPH2PS, which
/// is exact and which DAZ does not affect (it applies to fp32 operands; the start-up self-check
/// runs this code on fp16 denormals under the kernel's MXCSR, see
/// `super::daz_ftz_self_check`).
macro_rules! widen_fp16_row {
    ($off:literal) => {
        concat!(
            "vmovdqu ymm0, ymmword ptr [{pa} + ",
            $off,
            "]\n",
            "vmovdqu ymm1, ymmword ptr [{pa} + ",
            $off,
            " + 32]\n",
            "vpshufb ymm0, ymm0, ymm15\n",
            "vpshufb ymm1, ymm1, ymm15\n",
            "vpermq ymm0, ymm0, 0xD8\n",
            "vpermq ymm1, ymm1, 0xD8\n",
            "vcvtph2ps ymm2, xmm0\n",
            "vcvtph2ps ymm3, xmm1\n",
            "vmovaps ymmword ptr [{pb} + ",
            $off,
            "], ymm2\n",
            "vmovaps ymmword ptr [{pb} + ",
            $off,
            " + 32], ymm3\n",
            "vextracti128 xmm0, ymm0, 1\n",
            "vextracti128 xmm1, ymm1, 1\n",
            "vcvtph2ps ymm0, xmm0\n",
            "vcvtph2ps ymm1, xmm1\n",
            "vmovaps ymmword ptr [{pb} + 1024 + ",
            $off,
            "], ymm0\n",
            "vmovaps ymmword ptr [{pb} + 1024 + ",
            $off,
            " + 32], ymm1\n",
        )
    };
}

/// The VPSHUFB control of an fp16 row's 128-bit lane (4 dwords): the low halves (even
/// elements) to the low 8 bytes, the high halves (odd elements) to the high 8, in order.
#[repr(C, align(16))]
struct Split([u8; 16]);
static FP16_SPLIT: Split = Split([0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15]);

/// The asm block of [`float_kernel`] for one half-precision format: `$row` is its
/// [`widen_rows!`] row and `$mask` the instruction that turns ymm15's all-ones into that row's
/// mask.
macro_rules! float_kernel_asm {
    ($frame:expr, $jobs:expr, $row:ident, $mask:literal $(, $name:ident = sym $sym:path)?) => {
        asm!(
            "vstmxcsr dword ptr [{f}]",
            "vldmxcsr dword ptr [{f} + 4]",
            "vpcmpeqd ymm15, ymm15, ymm15",
            $mask,
            "test {nj}, {nj}",
            "jz 9f",
            "6:",
            "mov {a}, qword ptr [{jobs}]",
            "mov {b}, qword ptr [{jobs} + 8]",
            "mov {c}, qword ptr [{jobs} + 16]",
            "mov {out}, qword ptr [{jobs} + 24]",
            "mov {g}, qword ptr [{f} + 16]",
            "cmp {g}, 4",
            "jne 5f",
            // A whole tile: rows 0-5, 6-10 and 11-15, each group followed by the same rows of
            // the tiles to widen.
            float_group!(384; (0, 0, 1), (64, 2, 3), (128, 4, 5), (192, 6, 7), (256, 8, 9), (320, 10, 11)),
            widen_rows!($row; 0, 64, 128, 192, 256, 320),
            float_group!(320; (0, 0, 1), (64, 2, 3), (128, 4, 5), (192, 6, 7), (256, 8, 9)),
            widen_rows!($row; 384, 448, 512, 576, 640),
            float_group!(320; (0, 0, 1), (64, 2, 3), (128, 4, 5), (192, 6, 7), (256, 8, 9)),
            widen_rows!($row; 704, 768, 832, 896, 960),
            "jmp 7f",
            // Part of a tile (a single product, never with tiles to widen): `groups` groups
            // of 4 rows.
            "5:",
            "test {g}, {g}",
            "jz 7f",
            "4:",
            float_group!(256; (0, 0, 1), (64, 2, 3), (128, 4, 5), (192, 6, 7)),
            "dec {g}",
            "jnz 4b",
            "7:",
            "add {jobs}, 64",
            "dec {nj}",
            "jnz 6b",
            "9:",
            "vldmxcsr dword ptr [{f}]",
            f = in(reg) $frame,
            jobs = inout(reg) $jobs.as_ptr() => _,
            nj = inout(reg) $jobs.len() => _,
            a = out(reg) _,
            b = out(reg) _,
            c = out(reg) _,
            out = out(reg) _,
            g = out(reg) _,
            pa = out(reg) _,
            pb = out(reg) _,
            kk = out(reg) _,
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
            $($name = sym $sym,)?
            options(nostack),
        )
    };
}

/// For each job in order, its rows of C: `out[r] = c[r] + (te[r] + to[r])` with
/// `te[r] = sum_{k' < k} fma(ae[r][k'], be[k'])` and likewise for `to`, all under
/// [`MXCSR_AMX`], and the job's tiles to widen (see [`Job`]) widened as `half`. `groups` is
/// the number of 4-row groups the jobs' rows need; at 4 (whole tiles) the rows run as groups
/// of 6, 5 and 5 instead (see [`float_group!`]), and only then are tiles widened.
///
/// Each group's even sums run first, then its odd sums in the same registers, the even ones
/// set aside in `Frame::te`. Per k step that is 2 B vectors and one A broadcast per row for 2
/// FMAs per row: at most 0.75 loads per FMA, where computing both sums in one pass needs one
/// load per FMA, as many as some AVX2 cores sustain beside their two FMAs per cycle. `te + to`
/// is computed as `to + te`: the same value (addition is commutative; the order only matters
/// for NaNs, which the callers recompute).
///
/// The whole computation, MXCSR switch and restore included, is one asm block: the compiler
/// never sees a floating-point operation while MXCSR differs from its default, and the
/// caller's MXCSR (control bits and sticky flags) is restored before the block ends. A block
/// of products passes all the jobs of a step at once: each switch of MXCSR waits for the
/// floating-point work before it, and a switch per product cost the block kernel several
/// percent of its time (a switch per step of a 2x2 block measures the same as one per 8
/// steps).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C. `groups <= 4`, `k <= 16`; for each job, `a` and
/// `b` point to live [`Widened`] (64-byte aligned), `c` to `4 * groups` rows of 64 readable
/// bytes and `out` to as many writable ones, not overlapping any job's `a` or `b`; `out` may
/// be `c` itself (each row of C is read before the same row of `out` is written, and never
/// after), and a later job may read what an earlier one wrote. With `groups == 4`, each
/// non-null tile of a job's `widen` is 1024 readable bytes and its `into` a writable
/// [`Widened`] (64-byte aligned) that no job reads or writes before the job that widens it
/// has ended, and that is not `c` or `out` of any job; with `groups < 4`, `widen` is ignored.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn float_kernel(jobs: &[Job], k: usize, groups: usize, half: Half) {
    let mut frame = Frame {
        saved: 0,
        amx: MXCSR_AMX,
        k,
        groups,
        _pad: 0,
        te: [[0; 64]; 6],
    };
    let frame = &mut frame as *mut Frame;
    // SAFETY: the memory operands are within the jobs' operands as the caller guarantees
    // (`pa` walks dwords < k of ae rows 4g..4g + 4 or those of a group of 6 or 5 rows of a
    // whole tile, then of the same ao rows 1 KiB further; `pb` walks the first k rows of be,
    // then of bo 1 KiB further, 32-byte aligned; C and `out` rows below 4 * groups, or all 16
    // of a whole tile; the 16 rows of each tile to widen, 64 bytes each, unaligned loads, and
    // of its `Widened`, aligned stores), and within `frame` (`te`, 6 rows of 64 bytes at
    // offset 32, 32-byte aligned); `c == out` is sound as the contract says; the block saves
    // MXCSR into `frame` and restores it from there before exiting; `jobs` is read only,
    // `jobs.len()` entries of 64 bytes; ymm0-15 are declared clobbered, the pointer and
    // counter registers are outputs; no stack is used; the fp16 block also reads the 16
    // bytes of the static `FP16_SPLIT`. The CPU has AVX2, FMA and F16C (this function's
    // contract).
    unsafe {
        match half {
            Half::Bf16 => float_kernel_asm!(frame, jobs, widen_bf16_row, "vpslld ymm15, ymm15, 16"),
            Half::Fp16 => float_kernel_asm!(
                frame,
                jobs,
                widen_fp16_row,
                "vbroadcasti128 ymm15, xmmword ptr [rip + {split}]",
                split = sym FP16_SPLIT
            ),
        }
    }
}

/// A 2x2 block of integer products over `steps` k-steps (see `super::block`): for each step
/// `s`, with A0/A1 the tiles at `a + s * a_step` and `+ 1024` and B0/B1 those at
/// `b + s * b_step` and `+ 1024`, `C[2h + w] += Ah x Bw` on full tiles. With `a_biased`, every
/// byte of A is A's byte XOR 0x80 (TDPBSSD's A as a GEMM packs it for the AVX-512 kernel); it
/// is restored as it is widened.
///
/// The arithmetic of [`dot_int8`] (bytes extended to i16, VPMADDWD, VPADDD, all mod 2^32)
/// with the per-instruction costs taken out of the step loop:
/// * each tile of a step is extended once for the two products that read it (the
///   instruction-by-instruction path extends each twice);
/// * B's extended rows are stored with the dword pairs of a column split apart: for the 8
///   columns of a half row, one vector of the first two bytes of each column's dword (as i16
///   pairs) and one of the last two. A's i16 pair `(a[4k], a[4k + 1])` broadcast as a dword
///   times the first vector, plus `(a[4k + 2], a[4k + 3])` times the second, is then `A[m][k]`
///   times column `n` in dword lane `n`: the accumulators have C's layout (up to a fixed
///   permutation of quadwords, undone when C is stored), so they start from C and need no
///   pair sums at the end (the per-instruction kernel's VPHADDD);
/// * the accumulators of 4 rows (8 vectors) stay in registers over a chunk of [`INT8_CHUNK`]
///   steps, with B's 4 vectors of a k step loaded once for the 4 rows.
///
/// # Safety
/// The CPU must support AVX2; for every `s < steps`, the 2048 bytes at `a + s * a_step` and at
/// `b + s * b_step` must be readable.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_2x2_int8(
    c: &mut [[u8; 1024]; 4],
    a: (*const u8, usize),
    b: (*const u8, usize),
    steps: usize,
    signs: (bool, bool),
    a_biased: bool,
) {
    // SAFETY: forwarded from this function's contract (both arms).
    unsafe {
        if a_biased {
            int8_block::<true, true, true>(c, a, b, NONE_PREPARED, steps)
        } else {
            int8_signed(c, a, b, NONE_PREPARED, steps, signs)
        }
    }
}

/// [`int8_block`] for the signedness `signs`, A not biased.
///
/// # Safety
/// As [`int8_block`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn int8_signed(
    c: &mut [[u8; 1024]],
    a: (*const u8, usize),
    b: (*const u8, usize),
    prepared: (Option<PreparedTiles<'_>>, Option<PreparedTiles<'_>>),
    steps: usize,
    signs: (bool, bool),
) {
    // SAFETY: forwarded from this function's contract (every arm).
    unsafe {
        match signs {
            (true, true) => int8_block::<true, true, false>(c, a, b, prepared, steps),
            (true, false) => int8_block::<true, false, false>(c, a, b, prepared, steps),
            (false, true) => int8_block::<false, true, false>(c, a, b, prepared, steps),
            (false, false) => int8_block::<false, false, false>(c, a, b, prepared, steps),
        }
    }
}

/// No operand given extended ahead.
const NONE_PREPARED: (
    Option<PreparedTiles<'static>>,
    Option<PreparedTiles<'static>>,
) = (None, None);

/// [`dot_2x2_int8`] (A not biased) with A's or B's tiles (or both) given extended ahead
/// (`prepared`: A's as [`extend`] makes them, B's as [`extend_split`] does, with the
/// signedness `signs` gives each): the kernel reads those instead of extending the tiles per
/// call. A tile the prepared slice lacks is extended as usual. The same bits.
///
/// # Safety
/// As [`dot_2x2_int8`]; the prepared tiles hold the extended forms of the very tiles at `a`
/// and `b` (or the result is wrong, though nothing unsound happens).
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_2x2_int8_prepared(
    c: &mut [[u8; 1024]; 4],
    a: (*const u8, usize),
    b: (*const u8, usize),
    prepared: (Option<PreparedTiles<'_>>, Option<PreparedTiles<'_>>),
    steps: usize,
    signs: (bool, bool),
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { int8_signed(c, a, b, prepared, steps, signs) }
}

/// Writes `tile`'s bytes extended to i16 (sign-extended where `signed`) into `out` in B's split
/// layout: the form [`dot_2x2_int8_prepared`] reads for B.
#[target_feature(enable = "avx2")]
pub(super) fn extend_split(tile: &[u8; 1024], signed: bool, out: &mut Widened) {
    let dst = (out as *mut Widened).cast::<WideTile>();
    // SAFETY: `tile` is 1024 readable bytes; a `Widened` is 2048 writable bytes aligned to 64,
    // room for a `WideTile` of plain integers, which `widen_b_split` writes in full.
    unsafe {
        match signed {
            true => widen_b_split::<true>(tile.as_ptr(), dst),
            false => widen_b_split::<false>(tile.as_ptr(), dst),
        }
    }
}

/// Steps per visit of a group of rows in [`dot_2x2_int8`]: its accumulators are loaded and
/// stored once per chunk. Two steps of extended operands are 16 KiB, which leaves room in a
/// 32 KiB L1 for the packed operands streaming in.
const INT8_CHUNK: usize = 2;

/// One tile's rows extended to i16: 16 rows of 4 vectors.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct WideTile([[__m256i; 4]; ROWS]);

/// The quadword order of the block kernel's accumulators: quadwords 1 and 2 of a half row
/// exchanged (an involution, so the same VPERMQ maps C to it and back).
const ACC_ORDER: i32 = 0b11_01_10_00;

/// [`dot_2x2_int8`] on one row of tiles: `C[w] += A x Bw` for `w` in 0, 1 and each step in
/// order, A's step one tile (1024 bytes at `a + s * a_step`), B's two. The same arithmetic as
/// the 2x2 block (A extended once for both products, B in the split layout, 4 rows of C in
/// registers over a chunk of steps): a GEMM's micro-tiles of 16 rows (M = 16) run it.
///
/// # Safety
/// The CPU must support AVX2; for every `s < steps`, the 1024 bytes at `a + s * a_step` and the
/// 2048 at `b + s * b_step` must be readable.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_1x2_int8(
    c: &mut [[u8; 1024]; 2],
    a: (*const u8, usize),
    b: (*const u8, usize),
    steps: usize,
    signs: (bool, bool),
) {
    // SAFETY: forwarded from this function's contract; a 2-tile C reads one tile of A per
    // step.
    unsafe { int8_signed(c, a, b, NONE_PREPARED, steps, signs) }
}

/// [`dot_2x2_int8`] (4 C tiles) or [`dot_1x2_int8`] (2) for one signedness: `c` holds the C
/// tiles of `c.len() / 2` rows of tiles, tile `2h + w` of A's tile h and B's tile w. `UNBIAS`:
/// A's bytes are XORed with 0x80 before they are extended (then `SA` is true, and a prepared A
/// is not read). `prepared`: tiles extended ahead, read instead of extending those.
///
/// # Safety
/// The CPU must support AVX2; `c.len()` is 2 or 4; for every `s < steps`, the `c.len() / 2`
/// tiles at `a + s * a_step` and the 2048 bytes at `b + s * b_step` must be readable.
#[target_feature(enable = "avx2")]
unsafe fn int8_block<const SA: bool, const SB: bool, const UNBIAS: bool>(
    c: &mut [[u8; 1024]],
    (a, a_step): (*const u8, usize),
    (b, b_step): (*const u8, usize),
    (prepared_a, prepared_b): (Option<PreparedTiles<'_>>, Option<PreparedTiles<'_>>),
    steps: usize,
) {
    let heights = c.len() / 2;
    let prepared_a = if UNBIAS { None } else { prepared_a };
    // Extended operands of a chunk: tile `2 * j + h` is tile h of the chunk's step j, extended
    // into the buffer or found prepared. Only the tiles of the chunk's steps (and of A's rows
    // of tiles) are written, and only those read.
    let mut wa = MaybeUninit::<[WideTile; 2 * INT8_CHUNK]>::uninit();
    let mut wb = MaybeUninit::<[WideTile; 2 * INT8_CHUNK]>::uninit();
    let (wa_p, wb_p) = (
        wa.as_mut_ptr().cast::<WideTile>(),
        wb.as_mut_ptr().cast::<WideTile>(),
    );
    let mut ta = [wa_p.cast_const(); 2 * INT8_CHUNK];
    let mut tb = [wb_p.cast_const(); 2 * INT8_CHUNK];
    // A prepared tile, as the kernel reads it (a `Widened` is a `WideTile`'s 2048 bytes of
    // integers, aligned to 64).
    let found = |p: Option<PreparedTiles<'_>>, s: usize, h: usize| {
        p.and_then(|p| p.tile(s, h))
            .map(|w| (w as *const Widened).cast::<WideTile>())
    };
    for s0 in (0..steps).step_by(INT8_CHUNK) {
        let chunk = INT8_CHUNK.min(steps - s0);
        for i in 0..2 * chunk {
            let (j, h) = (i / 2, i % 2);
            // SAFETY: s0 + j < steps; A's tile h < heights and B's tile h < 2 of the step lie
            // inside the operands (the contract); i < 2 * INT8_CHUNK slots of the buffers.
            unsafe {
                if h < heights {
                    ta[i] = found(prepared_a, s0 + j, h).unwrap_or_else(|| {
                        widen_a::<SA, UNBIAS>(a.add((s0 + j) * a_step + h * 1024), wa_p.add(i));
                        wa_p.add(i)
                    });
                }
                tb[i] = found(prepared_b, s0 + j, h).unwrap_or_else(|| {
                    widen_b_split::<SB>(b.add((s0 + j) * b_step + h * 1024), wb_p.add(i));
                    wb_p.add(i)
                });
            }
        }
        for (t, tile) in c.iter_mut().enumerate() {
            let (h, w) = (t / 2, t % 2);
            for m0 in (0..ROWS).step_by(4) {
                // SAFETY: the slots 2 * j + h (h < heights) and 2 * j + w for j < chunk were
                // set above, to written or prepared tiles, and m0 + 4 <= 16.
                unsafe { int8_block_rows(tile, m0, (&ta[h..], &tb[w..]), chunk) };
            }
        }
    }
}

/// Tile `src` (1024 readable bytes) extended to i16 into `dst`, row by row in order (A's
/// layout: dword `2k + p` of a row is the i16 pair of bytes `4k + 2p`, `4k + 2p + 1`).
///
/// # Safety
/// The CPU must support AVX2; `src` is 1024 readable bytes, `dst` a writable [`WideTile`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn widen_a<const SIGNED: bool, const UNBIAS: bool>(src: *const u8, dst: *mut WideTile) {
    let bias = _mm_set1_epi8(0x80_u8 as i8);
    let out = dst.cast::<__m256i>();
    for i in 0..4 * ROWS {
        // SAFETY: i * 16 + 16 <= 1024 bytes of `src`, slot i < 64 of `dst` (the contract).
        unsafe {
            let mut x = _mm_loadu_si128(src.add(i * 16).cast());
            if UNBIAS {
                x = _mm_xor_si128(x, bias);
            }
            let v = if SIGNED {
                _mm256_cvtepi8_epi16(x)
            } else {
                _mm256_cvtepu8_epi16(x)
            };
            _mm256_store_si256(out.add(i), v);
        }
    }
}

/// Tile `src` (1024 readable bytes) extended to i16 into `dst` in B's split layout: row k is
/// `[first pairs of columns 0..8, last pairs of 0..8, first pairs of 8..16, last pairs of
/// 8..16]`, each vector's dword lanes holding the columns in the order
/// `[0, 1, 4, 5, 2, 3, 6, 7]` (+ 8), the order [`ACC_ORDER`] gives C.
///
/// # Safety
/// The CPU must support AVX2; `src` is 1024 readable bytes, `dst` a writable [`WideTile`].
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn widen_b_split<const SIGNED: bool>(src: *const u8, dst: *mut WideTile) {
    let widen = |p: *const u8| {
        // SAFETY: the callers below pass 16 readable bytes inside `src`.
        let x = unsafe { _mm_loadu_si128(p.cast()) };
        _mm256_castsi256_ps(if SIGNED {
            _mm256_cvtepi8_epi16(x)
        } else {
            _mm256_cvtepu8_epi16(x)
        })
    };
    let out = dst.cast::<__m256i>();
    for k in 0..ROWS {
        for q in 0..2 {
            // SAFETY: k * 64 + q * 32 + 32 <= 1024 bytes of `src`.
            let (w0, w1) = unsafe {
                let row = src.add(k * 64 + q * 32);
                (widen(row), widen(row.add(16)))
            };
            // Dword 2n + p of w0 (w1) is pair p of column n (n + 4) of this half row:
            // SHUFPS picks the even (0x88) or odd (0xDD) dwords of each 128-bit lane of both.
            let first = _mm256_castps_si256(_mm256_shuffle_ps::<0x88>(w0, w1));
            let last = _mm256_castps_si256(_mm256_shuffle_ps::<0xDD>(w0, w1));
            // SAFETY: slot 4k + 2q + 1 < 64 of `dst` (the contract).
            unsafe {
                _mm256_store_si256(out.add(4 * k + 2 * q), first);
                _mm256_store_si256(out.add(4 * k + 2 * q + 1), last);
            }
        }
    }
}

/// Rows `m0..m0 + 4` of one C tile over `chunk` steps: A's extended tiles at `wa[0]`,
/// `wa[2]`, ... and B's at `wb[0]`, `wb[2]`, ... (one per step).
///
/// # Safety
/// The CPU must support AVX2; `wa[2 * j]` and `wb[2 * j]` for `j < chunk` point to written
/// tiles ([`widen_a`], [`widen_b_split`], or their prepared forms); `m0 + 4 <= 16`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn int8_block_rows(
    c: &mut [u8; 1024],
    m0: usize,
    (wa, wb): (&[*const WideTile], &[*const WideTile]),
    chunk: usize,
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; 4];
    for (r, pair) in acc.iter_mut().enumerate() {
        for (q, v) in pair.iter_mut().enumerate() {
            *v = _mm256_permute4x64_epi64::<ACC_ORDER>(load_half_row(c, m0 + r, q));
        }
    }
    for j in 0..chunk {
        // SAFETY: entries 2j of both lists point to written tiles (the contract).
        let (ta, tb) = unsafe { (&*wa[2 * j], &*wb[2 * j]) };
        // A's rows as dwords: dword 2k + p of row m is A's i16 pair p of dword k.
        // SAFETY: a WideTile is 16 rows of 128 bytes of plain integers, readable as 32 i32
        // per row (alignment 64 exceeds theirs).
        let a_rows: &[[i32; 32]; ROWS] = unsafe { &*(ta as *const WideTile).cast() };
        for (k, bk) in tb.0.iter().enumerate() {
            for (r, pair) in acc.iter_mut().enumerate() {
                let row = &a_rows[(m0 + r) % ROWS];
                let a0 = _mm256_set1_epi32(row[(2 * k) % 32]);
                let a1 = _mm256_set1_epi32(row[(2 * k + 1) % 32]);
                let lo =
                    _mm256_add_epi32(_mm256_madd_epi16(a0, bk[0]), _mm256_madd_epi16(a1, bk[1]));
                let hi =
                    _mm256_add_epi32(_mm256_madd_epi16(a0, bk[2]), _mm256_madd_epi16(a1, bk[3]));
                pair[0] = _mm256_add_epi32(pair[0], lo);
                pair[1] = _mm256_add_epi32(pair[1], hi);
            }
        }
    }
    for (r, pair) in acc.iter().enumerate() {
        let row = [
            _mm256_permute4x64_epi64::<ACC_ORDER>(pair[0]),
            _mm256_permute4x64_epi64::<ACC_ORDER>(pair[1]),
        ];
        store_row(c, m0 + r, DWORDS, row);
    }
}
