//! AVX-512 kernels (x86-64 only), selected at run time by the dispatchers in `super`.
//!
//! * `TDPB[SU][SU]D`: VPDPBUSD (u8 x s8, four products per dword, wrapping 32-bit accumulate)
//!   with a bias trick for the signedness combinations it lacks.
//! * TDPBF16PS/TDPFP16PS: VFMADD231PS over whole C rows, inside a single inline-asm block that
//!   runs under MXCSR = DAZ|FTZ|round-to-nearest|all masked. x86 FTZ detects tininess after
//!   rounding (at an unbounded exponent) and also flushes exact denormal results, and DAZ zeroes
//!   denormal inputs keeping their sign before the invalid-operation check; that is exactly
//!   section 10 for every lane that does not end in a NaN (the differential tests check it).
//!   Lanes that end in a NaN are recomputed by the exact model, since the hardware FMA's NaN
//!   operand priority follows the instruction encoding, not `x, y, acc`.

use core::arch::asm;
use core::arch::x86_64::{
    __m512i, __mmask16, _mm512_add_epi16, _mm512_add_epi32, _mm512_and_si512, _mm512_castps_si512,
    _mm512_castsi512_ps, _mm512_cvtepi32_epi16, _mm512_cvtph_ps, _mm512_dpbusd_epi32,
    _mm512_loadu_si512, _mm512_madd_epi16, _mm512_maddubs_epi16, _mm512_mask_blend_epi16,
    _mm512_mask_cmp_ps_mask, _mm512_mask_storeu_epi32, _mm512_maskz_mov_epi32,
    _mm512_permutexvar_epi16, _mm512_set1_epi16, _mm512_set1_epi32, _mm512_set1_epi8,
    _mm512_setzero_si512, _mm512_shuffle_i32x4, _mm512_slli_epi32, _mm512_srli_epi32,
    _mm512_storeu_si512, _mm512_sub_epi32, _mm512_unpackhi_epi32, _mm512_unpackhi_epi64,
    _mm512_unpacklo_epi32, _mm512_unpacklo_epi64, _mm512_xor_si512, _mm_prefetch, _CMP_UNORD_Q,
    _MM_HINT_T0,
};
use core::mem::MaybeUninit;
use core::sync::atomic::AtomicU8;

use super::{exact, get_dword, set_dword, Half, Widened, DWORDS, ROWS};

/// Whether [`dot_int8`] may run on this CPU.
#[inline]
pub(super) fn int8_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// Whether [`dot_half`] may run on this CPU: AVX-512F, and DAZ/FTZ behaving as section 10
/// needs (checked once per process by `super::daz_ftz_self_check`).
#[inline]
pub(super) fn float_available() -> bool {
    static STATE: AtomicU8 = AtomicU8::new(0);
    super::decided_once(&STATE, || {
        std::arch::is_x86_feature_detected!("avx512f")
            && super::daz_ftz_self_check(|c, a, b, m, n, k| {
                // SAFETY: the CPU supports AVX-512F (checked just before, `&&` short-circuits).
                unsafe { dot_half(c, a, b, m, n, k, Half::Bf16) }
            })
            // SAFETY: as above.
            && unsafe { fp16_one_row_under_daz() }
    })
}

/// Whether the bf16 kernels may run VDPBF16PS, two k-steps per instruction
/// ([`super::pairs`]): the float path's own conditions ([`float_available`]), AVX512BW (the
/// operands are re-paired with 16-bit permutes and blends), AVX512_BF16, and the CPU's
/// VDPBF16PS agreeing with two `fma32` steps ([`super::pairs::self_check`]). Checked once per
/// process.
#[inline]
pub(super) fn pairs_available() -> bool {
    static STATE: AtomicU8 = AtomicU8::new(0);
    super::decided_once(&STATE, || {
        float_available()
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512bf16")
            && super::pairs::self_check(|acc, a, b| {
                // SAFETY: the CPU supports AVX-512F and AVX512_BF16 (checked just before, `&&`
                // short-circuits).
                unsafe { dpbf16_lanes(acc, a, b) }
            })
    })
}

/// One VDPBF16PS on 16 lanes, under [`MXCSR_AMX`] as the kernels run it: `acc` plus the
/// products of the bf16 pairs of `a` and `b`, lane by lane.
///
/// # Safety
/// The CPU must support AVX-512F and AVX512_BF16.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dpbf16_lanes(
    acc: &[u32; super::pairs::LANES],
    a: &[u32; super::pairs::LANES],
    b: &[u32; super::pairs::LANES],
) -> [u32; super::pairs::LANES] {
    let mut out = [0u32; super::pairs::LANES];
    let mut csr = [0u32, MXCSR_AMX];
    // SAFETY: the loads read the three 64-byte arrays and the store writes `out`, all live;
    // `csr` is a live local MXCSR is saved into and restored from before the block ends; the
    // instructions are ones the CPU supports (this function's contract); zmm0 to zmm2 are
    // declared clobbered.
    unsafe {
        asm!(
            "vstmxcsr dword ptr [{csr}]",
            "vldmxcsr dword ptr [{csr} + 4]",
            "vmovdqu32 zmm0, zmmword ptr [{acc}]",
            "vmovdqu32 zmm1, zmmword ptr [{a}]",
            "vmovdqu32 zmm2, zmmword ptr [{b}]",
            "vdpbf16ps zmm0, zmm1, zmm2",
            "vmovdqu32 zmmword ptr [{out}], zmm0",
            "vldmxcsr dword ptr [{csr}]",
            csr = in(reg) csr.as_mut_ptr(),
            acc = in(reg) acc.as_ptr(),
            a = in(reg) a.as_ptr(),
            b = in(reg) b.as_ptr(),
            out = in(reg) out.as_mut_ptr(),
            out("zmm0") _,
            out("zmm1") _,
            out("zmm2") _,
            options(nostack),
        );
    }
    out
}

/// MXCSR inside the floating-point kernel: FTZ (bit 15), round to nearest (bits 14:13 = 0), all
/// six exceptions masked (bits 12:7), DAZ (bit 6), no status flags.
const MXCSR_AMX: u32 = 0x9FC0;

/// Rows of C one pass of the kernel's k loop computes: 16 independent FMA chains (te and to per
/// row), enough to cover the FMA latency on both FMA ports, with B's two vectors in registers.
const GROUP: usize = 8;

/// One tile's worth of vectors (16 rows of 16 dwords), 64-byte aligned by its element type.
type Panel = [__m512i; ROWS];

/// Row `r` (< 16) of a tile.
#[inline]
#[target_feature(enable = "avx512f")]
fn load_row(t: &[u8; 1024], r: usize) -> __m512i {
    let row: &[u8; 64] = t[r * 64..r * 64 + 64].try_into().unwrap_or(&[0; 64]);
    // SAFETY: `row` is 64 readable bytes; the load is unaligned.
    unsafe { _mm512_loadu_si512(row.as_ptr().cast()) }
}

/// Stores the dwords of `v` selected by `mask` to row `r` (< 16) of a tile.
#[inline]
#[target_feature(enable = "avx512f")]
fn store_row_masked(t: &mut [u8; 1024], r: usize, mask: __mmask16, v: __m512i) {
    let row: &mut [u8] = &mut t[r * 64..r * 64 + 64];
    if row.len() == 64 {
        // SAFETY: `row` is 64 writable bytes; only the masked-in dwords are written.
        unsafe { _mm512_mask_storeu_epi32(row.as_mut_ptr().cast(), mask, v) }
    }
}

/// The mask of the first `n` (<= 16) dwords.
#[inline]
fn lane_mask(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// `TDPB[SU][SU]D` with VPDPBUSD, which multiplies an unsigned byte by a signed byte.
///
/// * US: A bytes are the u8 operand, B bytes the s8 operand: VPDPBUSD as is.
/// * SU: B is the u8 operand, A the s8 operand (the product commutes).
/// * SS: `a = (a ^ 0x80) - 128` as u8, so `sum a*b = sum (a^0x80)*b - 128 * sum b`, with
///   `128 * sum b` per column n obtained by VPDPBUSD(0x80 bytes, B).
/// * UU: `a = (a ^ 0x80) + 128` as s8, so `sum a*b = sum b*(a^0x80) + 128 * sum b`; VPDPBUSD(B,
///   0x80 bytes) gives `-128 * sum b`.
///
/// So A is biased by 0x80 exactly when both operands have the same signedness, the corrections
/// depend on n only (one vector per call, K extra VPDPBUSD), and everything is mod 2^32.
///
/// A 16-row SS product instead biases B and subtracts per-row sums of A
/// ([`full_tile_int8_signed_signed`]), so that A stays VPDPBUSD's broadcast memory operand.
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX-512 VNNI ([`int8_available`]).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
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
    let (m_rows, n_dwords, k_dwords) = super::clamp(m_rows, n_dwords, k_dwords);
    if m_rows == 0 || n_dwords == 0 {
        return;
    }
    if m_rows == ROWS && a_signed && b_signed {
        // SAFETY: the CPU supports AVX-512F and AVX-512 VNNI (this function's contract), and
        // the shape is clamped and nonempty.
        unsafe {
            let mut corr = [0; ROWS];
            row_corrections(a, k_dwords, &mut corr);
            dot_int8_ss_corrected(c, a, b, (m_rows, n_dwords, k_dwords), &corr)
        };
        return;
    }
    let biased = a_signed == b_signed;
    if m_rows == 1 {
        // A GEMV's edge tiles: one row, biased as it is broadcast.
        let shape = Int8Shape {
            m_rows,
            n_dwords,
            k_dwords,
        };
        match (b_signed, biased) {
            (true, true) => int8_one_row::<true, true>(c, a, b, shape),
            (true, false) => int8_one_row::<true, false>(c, a, b, shape),
            (false, true) => int8_one_row::<false, true>(c, a, b, shape),
            (false, false) => int8_one_row::<false, false>(c, a, b, shape),
        }
        return;
    }
    let splat = _mm512_set1_epi32(0x8080_8080_u32 as i32);
    // A with the bias applied, when there is one, so the hot loop only broadcasts dwords.
    // Built row by row, never zero-filled first (see `dot_half`); not built at all without a
    // bias (the copy was a tenth of the instruction).
    let a_biased: [u8; 1024];
    let a = if biased {
        let rows: Panel = core::array::from_fn(|m| _mm512_xor_si512(load_row(a, m), splat));
        // SAFETY: 16 vectors of 64 bytes are 1024 bytes, and every bit pattern is a valid
        // `u8`.
        a_biased = unsafe { core::mem::transmute::<Panel, [u8; 1024]>(rows) };
        &a_biased
    } else {
        a
    };
    // The correction, one vector for all rows: K extra VPDPBUSD (none when unbiased), in two
    // independent chains so that their latency overlaps.
    let mut corr = [_mm512_setzero_si512(); 2];
    if biased {
        for k in 0..k_dwords {
            let bk = load_row(b, k);
            let acc = &mut corr[k % 2];
            *acc = if b_signed {
                _mm512_dpbusd_epi32(*acc, splat, bk)
            } else {
                _mm512_dpbusd_epi32(*acc, bk, splat)
            };
        }
    }
    let corr = _mm512_add_epi32(corr[0], corr[1]);
    let shape = Int8Shape {
        m_rows,
        n_dwords,
        k_dwords,
    };
    if m_rows == ROWS && !b_signed {
        // SAFETY: `a`, `b` and `c` hold 16 rows of 64 bytes and k_dwords <= 16, so the
        // kernel's reads (A dwords k < k_dwords of rows 0..16, B rows 0..k_dwords, C rows
        // 0..16) and masked writes (C rows 0..16) are in bounds; the pointers come from live
        // borrows, and `c` does not overlap the others (`&mut`). A is the signed operand when B
        // is unsigned. The CPU supports AVX-512F and AVX-512 VNNI (this function's contract).
        unsafe {
            full_tile_int8_a_signed(
                c.as_mut_ptr(),
                a.as_ptr(),
                b.as_ptr(),
                k_dwords,
                lane_mask(n_dwords),
                corr,
            )
        };
        return;
    }
    // 16 accumulators cover VPDPBUSD's latency on both ports; 8 are enough for small M.
    match (b_signed, m_rows > 8) {
        (true, true) => int8_rows::<true, 16>(c, a, b, shape, corr),
        (true, false) => int8_rows::<true, 8>(c, a, b, shape, corr),
        (false, true) => int8_rows::<false, 16>(c, a, b, shape, corr),
        (false, false) => int8_rows::<false, 8>(c, a, b, shape, corr),
    }
}

/// TDPBSSD on a clamped shape, given A's [`row_corrections`] over `k_dwords`: the whole-tile
/// kernel for 16 rows, [`dot_int8`]'s row loop otherwise (which does not need them).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 VNNI; `corr` is `row_corrections(a, k_dwords)`
/// (otherwise the result is wrong, never out of bounds).
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn dot_int8_ss_corrected(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    corr: &[i32; ROWS],
) {
    let (m_rows, n_dwords, k_dwords) = super::clamp(m_rows, n_dwords, k_dwords);
    if m_rows != ROWS || n_dwords == 0 {
        // SAFETY: the CPU supports AVX-512F and AVX-512 VNNI (this function's contract).
        unsafe { dot_int8(c, a, b, m_rows, n_dwords, k_dwords, true, true) };
        return;
    }
    // SAFETY: `a`, `b` and `c` hold 16 rows of 64 bytes and k_dwords <= 16, so the kernel's
    // reads (A dwords k < k_dwords of rows 0..16, B rows 0..k_dwords, C rows 0..16, the 16
    // corrections) and masked writes (C rows 0..16) are in bounds; the pointers come from live
    // borrows, and `c` does not overlap the others (`&mut`). The CPU supports AVX-512F and
    // AVX-512 VNNI (this function's contract).
    unsafe {
        full_tile_int8_signed_signed(
            c.as_mut_ptr(),
            a.as_ptr(),
            b.as_ptr(),
            k_dwords,
            lane_mask(n_dwords),
            corr,
        )
    };
}

/// The (clamped, nonempty) shape of an integer product.
#[derive(Clone, Copy)]
struct Int8Shape {
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
}

/// The VPDPBUSD loop over groups of `G` rows; `A_IS_U8` says whether the (biased) A bytes are
/// the unsigned operand. `a` is A, biased as needed.
#[target_feature(enable = "avx512f,avx512vnni")]
fn int8_rows<const A_IS_U8: bool, const G: usize>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    shape: Int8Shape,
    corr: __m512i,
) {
    let mask = lane_mask(shape.n_dwords);
    for m0 in (0..shape.m_rows).step_by(G) {
        // Rows past m_rows (up to the group's end, at most row 15) are computed from whatever
        // the tiles hold and then dropped.
        // From zero, C added at the end: the k chains then do not wait for the previous
        // instruction's store of C, so back-to-back products on one C tile overlap.
        let mut acc = [_mm512_setzero_si512(); G];
        for k in 0..shape.k_dwords {
            let bk = load_row(b, k);
            for (j, v) in acc.iter_mut().enumerate() {
                // SAFETY: row (m0 + j) % 16 < 16 and k < k_dwords <= 16 (clamped), so the
                // dword's 4 bytes lie inside A's 1024.
                let av = _mm512_set1_epi32(unsafe {
                    a.as_ptr()
                        .add(((m0 + j) % ROWS) * 64 + k * 4)
                        .cast::<i32>()
                        .read_unaligned()
                });
                *v = if A_IS_U8 {
                    _mm512_dpbusd_epi32(*v, av, bk)
                } else {
                    _mm512_dpbusd_epi32(*v, bk, av)
                };
            }
        }
        for (j, v) in acc.iter().enumerate().take(shape.m_rows - m0) {
            let sum = _mm512_add_epi32(*v, load_row(c, m0 + j));
            store_row_masked(c, m0 + j, mask, _mm512_sub_epi32(sum, corr));
        }
    }
}

/// [`dot_int8`] on row 0 of C only (`m_rows` = 1): the same products and correction as
/// [`int8_rows`] with its bias (`BIASED`: A's bytes XOR 0x80, and the correction subtracted),
/// A's dword biased as it is broadcast rather than in a copy of the whole tile, and the k
/// sums in two chains (even and odd k) so that VPDPBUSD's latency overlaps: the sums wrap
/// mod 2^32, so their order does not change them. The correction, 0x80 times the sum of each
/// column's bytes of B, is summed in 16-bit lanes (VPMADDUBSW of B's byte pairs, exact: at
/// most 16 x 510 in magnitude) and multiplied out once, rather than by a VPDPBUSD per k.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn int8_one_row<const B_SIGNED: bool, const BIASED: bool>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    shape: Int8Shape,
) {
    let splat = _mm512_set1_epi32(0x8080_8080_u32 as i32);
    let ones = _mm512_set1_epi8(1);
    let mut acc = [_mm512_setzero_si512(); 2];
    let mut pairs = _mm512_setzero_si512();
    for k in 0..shape.k_dwords {
        let bk = load_row(b, k);
        // SAFETY: k < k_dwords <= 16 (clamped), so the dword's 4 bytes lie in A's row 0.
        let mut av =
            _mm512_set1_epi32(unsafe { a.as_ptr().add(k * 4).cast::<i32>().read_unaligned() });
        if BIASED {
            av = _mm512_xor_si512(av, splat);
            // B's byte pairs summed: VPMADDUBSW's unsigned operand is B where B is unsigned.
            let two = if B_SIGNED {
                _mm512_maddubs_epi16(ones, bk)
            } else {
                _mm512_maddubs_epi16(bk, ones)
            };
            pairs = _mm512_add_epi16(pairs, two);
        }
        let x = &mut acc[k % 2];
        // The (biased) A is VPDPBUSD's unsigned operand where B is signed, as in `int8_rows`.
        *x = if B_SIGNED {
            _mm512_dpbusd_epi32(*x, av, bk)
        } else {
            _mm512_dpbusd_epi32(*x, bk, av)
        };
    }
    let sum = _mm512_add_epi32(_mm512_add_epi32(acc[0], acc[1]), load_row(c, 0));
    // The bias's share, as VPDPBUSD(0x80 bytes, B) and VPDPBUSD(B, 0x80 bytes) give it: 128
    // times the signed sum of B's bytes, or -128 times the unsigned one.
    let scale = _mm512_set1_epi16(if B_SIGNED { 128 } else { -128 });
    let corr = _mm512_madd_epi16(pairs, scale);
    store_row_masked(c, 0, lane_mask(shape.n_dwords), _mm512_sub_epi32(sum, corr));
}

/// Zeroes zmm0-15, the 16 accumulators (one per row of C) of the whole-tile integer kernels.
macro_rules! zero_accumulators {
    () => {
        concat!(
            "vpxord xmm0, xmm0, xmm0\n",
            "vpxord xmm1, xmm1, xmm1\n",
            "vpxord xmm2, xmm2, xmm2\n",
            "vpxord xmm3, xmm3, xmm3\n",
            "vpxord xmm4, xmm4, xmm4\n",
            "vpxord xmm5, xmm5, xmm5\n",
            "vpxord xmm6, xmm6, xmm6\n",
            "vpxord xmm7, xmm7, xmm7\n",
            "vpxord xmm8, xmm8, xmm8\n",
            "vpxord xmm9, xmm9, xmm9\n",
            "vpxord xmm10, xmm10, xmm10\n",
            "vpxord xmm11, xmm11, xmm11\n",
            "vpxord xmm12, xmm12, xmm12\n",
            "vpxord xmm13, xmm13, xmm13\n",
            "vpxord xmm14, xmm14, xmm14\n",
            "vpxord xmm15, xmm15, xmm15\n",
        )
    };
}

/// One k-step of the whole-tile integer kernels: B's row, in zmm16 (VPDPBUSD's unsigned
/// operand), against each row m's A dword at `[rsi + 64 m]` (the signed operand, broadcast from
/// memory), into accumulator m.
macro_rules! vpdpbusd_rows {
    () => {
        concat!(
            "vpdpbusd zmm0, zmm16, dword ptr [rsi + 0]{{1to16}}\n",
            "vpdpbusd zmm1, zmm16, dword ptr [rsi + 64]{{1to16}}\n",
            "vpdpbusd zmm2, zmm16, dword ptr [rsi + 128]{{1to16}}\n",
            "vpdpbusd zmm3, zmm16, dword ptr [rsi + 192]{{1to16}}\n",
            "vpdpbusd zmm4, zmm16, dword ptr [rsi + 256]{{1to16}}\n",
            "vpdpbusd zmm5, zmm16, dword ptr [rsi + 320]{{1to16}}\n",
            "vpdpbusd zmm6, zmm16, dword ptr [rsi + 384]{{1to16}}\n",
            "vpdpbusd zmm7, zmm16, dword ptr [rsi + 448]{{1to16}}\n",
            "vpdpbusd zmm8, zmm16, dword ptr [rsi + 512]{{1to16}}\n",
            "vpdpbusd zmm9, zmm16, dword ptr [rsi + 576]{{1to16}}\n",
            "vpdpbusd zmm10, zmm16, dword ptr [rsi + 640]{{1to16}}\n",
            "vpdpbusd zmm11, zmm16, dword ptr [rsi + 704]{{1to16}}\n",
            "vpdpbusd zmm12, zmm16, dword ptr [rsi + 768]{{1to16}}\n",
            "vpdpbusd zmm13, zmm16, dword ptr [rsi + 832]{{1to16}}\n",
            "vpdpbusd zmm14, zmm16, dword ptr [rsi + 896]{{1to16}}\n",
            "vpdpbusd zmm15, zmm16, dword ptr [rsi + 960]{{1to16}}\n",
        )
    };
}

/// The k loop of the whole-tile integer kernels, after zeroing the accumulators: per k-step,
/// B's row into zmm16 by `$load_b` (a plain load, or one that biases it), then
/// `vpdpbusd_rows!`; A's pointer in rsi and B's in rdx advance, rcx counts the steps down (none
/// when it starts at 0). Ends at local label 3.
macro_rules! k_loop {
    ($load_b:literal) => {
        concat!(
            zero_accumulators!(),
            "test rcx, rcx\n",
            "jz 3f\n",
            "2:\n",
            $load_b,
            "\n",
            vpdpbusd_rows!(),
            "add rdx, 64\n",
            "add rsi, 4\n",
            "dec rcx\n",
            "jnz 2b\n",
            "3:\n",
        )
    };
}

/// The whole-tile integer kernels' epilogue: row m of C (at `{c}`) plus accumulator m minus the
/// correction, stored under `{mask}`. The correction is one vector for every row (the operand
/// given), or with `rows:` row m's dword of the array at the given register, broadcast.
#[rustfmt::skip] // one line per instruction pair, as in the asm
macro_rules! add_c_and_store {
    ($corr:literal) => {
        concat!(
            "vpaddd zmm0, zmm0, zmmword ptr [{c} + 0]\n", "vpsubd zmm0, zmm0, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 0] {{{mask}}}, zmm0\n",
            "vpaddd zmm1, zmm1, zmmword ptr [{c} + 64]\n", "vpsubd zmm1, zmm1, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 64] {{{mask}}}, zmm1\n",
            "vpaddd zmm2, zmm2, zmmword ptr [{c} + 128]\n", "vpsubd zmm2, zmm2, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 128] {{{mask}}}, zmm2\n",
            "vpaddd zmm3, zmm3, zmmword ptr [{c} + 192]\n", "vpsubd zmm3, zmm3, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 192] {{{mask}}}, zmm3\n",
            "vpaddd zmm4, zmm4, zmmword ptr [{c} + 256]\n", "vpsubd zmm4, zmm4, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 256] {{{mask}}}, zmm4\n",
            "vpaddd zmm5, zmm5, zmmword ptr [{c} + 320]\n", "vpsubd zmm5, zmm5, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 320] {{{mask}}}, zmm5\n",
            "vpaddd zmm6, zmm6, zmmword ptr [{c} + 384]\n", "vpsubd zmm6, zmm6, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 384] {{{mask}}}, zmm6\n",
            "vpaddd zmm7, zmm7, zmmword ptr [{c} + 448]\n", "vpsubd zmm7, zmm7, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 448] {{{mask}}}, zmm7\n",
            "vpaddd zmm8, zmm8, zmmword ptr [{c} + 512]\n", "vpsubd zmm8, zmm8, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 512] {{{mask}}}, zmm8\n",
            "vpaddd zmm9, zmm9, zmmword ptr [{c} + 576]\n", "vpsubd zmm9, zmm9, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 576] {{{mask}}}, zmm9\n",
            "vpaddd zmm10, zmm10, zmmword ptr [{c} + 640]\n", "vpsubd zmm10, zmm10, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 640] {{{mask}}}, zmm10\n",
            "vpaddd zmm11, zmm11, zmmword ptr [{c} + 704]\n", "vpsubd zmm11, zmm11, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 704] {{{mask}}}, zmm11\n",
            "vpaddd zmm12, zmm12, zmmword ptr [{c} + 768]\n", "vpsubd zmm12, zmm12, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 768] {{{mask}}}, zmm12\n",
            "vpaddd zmm13, zmm13, zmmword ptr [{c} + 832]\n", "vpsubd zmm13, zmm13, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 832] {{{mask}}}, zmm13\n",
            "vpaddd zmm14, zmm14, zmmword ptr [{c} + 896]\n", "vpsubd zmm14, zmm14, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 896] {{{mask}}}, zmm14\n",
            "vpaddd zmm15, zmm15, zmmword ptr [{c} + 960]\n", "vpsubd zmm15, zmm15, ", $corr, "\n",
            "vmovdqu32 zmmword ptr [{c} + 960] {{{mask}}}, zmm15\n",
        )
    };
    (rows: $base:literal) => {
        concat!(
            "vpaddd zmm0, zmm0, zmmword ptr [{c} + 0]\n", "vpsubd zmm0, zmm0, dword ptr [", $base, " + 0]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 0] {{{mask}}}, zmm0\n",
            "vpaddd zmm1, zmm1, zmmword ptr [{c} + 64]\n", "vpsubd zmm1, zmm1, dword ptr [", $base, " + 4]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 64] {{{mask}}}, zmm1\n",
            "vpaddd zmm2, zmm2, zmmword ptr [{c} + 128]\n", "vpsubd zmm2, zmm2, dword ptr [", $base, " + 8]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 128] {{{mask}}}, zmm2\n",
            "vpaddd zmm3, zmm3, zmmword ptr [{c} + 192]\n", "vpsubd zmm3, zmm3, dword ptr [", $base, " + 12]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 192] {{{mask}}}, zmm3\n",
            "vpaddd zmm4, zmm4, zmmword ptr [{c} + 256]\n", "vpsubd zmm4, zmm4, dword ptr [", $base, " + 16]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 256] {{{mask}}}, zmm4\n",
            "vpaddd zmm5, zmm5, zmmword ptr [{c} + 320]\n", "vpsubd zmm5, zmm5, dword ptr [", $base, " + 20]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 320] {{{mask}}}, zmm5\n",
            "vpaddd zmm6, zmm6, zmmword ptr [{c} + 384]\n", "vpsubd zmm6, zmm6, dword ptr [", $base, " + 24]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 384] {{{mask}}}, zmm6\n",
            "vpaddd zmm7, zmm7, zmmword ptr [{c} + 448]\n", "vpsubd zmm7, zmm7, dword ptr [", $base, " + 28]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 448] {{{mask}}}, zmm7\n",
            "vpaddd zmm8, zmm8, zmmword ptr [{c} + 512]\n", "vpsubd zmm8, zmm8, dword ptr [", $base, " + 32]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 512] {{{mask}}}, zmm8\n",
            "vpaddd zmm9, zmm9, zmmword ptr [{c} + 576]\n", "vpsubd zmm9, zmm9, dword ptr [", $base, " + 36]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 576] {{{mask}}}, zmm9\n",
            "vpaddd zmm10, zmm10, zmmword ptr [{c} + 640]\n", "vpsubd zmm10, zmm10, dword ptr [", $base, " + 40]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 640] {{{mask}}}, zmm10\n",
            "vpaddd zmm11, zmm11, zmmword ptr [{c} + 704]\n", "vpsubd zmm11, zmm11, dword ptr [", $base, " + 44]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 704] {{{mask}}}, zmm11\n",
            "vpaddd zmm12, zmm12, zmmword ptr [{c} + 768]\n", "vpsubd zmm12, zmm12, dword ptr [", $base, " + 48]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 768] {{{mask}}}, zmm12\n",
            "vpaddd zmm13, zmm13, zmmword ptr [{c} + 832]\n", "vpsubd zmm13, zmm13, dword ptr [", $base, " + 52]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 832] {{{mask}}}, zmm13\n",
            "vpaddd zmm14, zmm14, zmmword ptr [{c} + 896]\n", "vpsubd zmm14, zmm14, dword ptr [", $base, " + 56]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 896] {{{mask}}}, zmm14\n",
            "vpaddd zmm15, zmm15, zmmword ptr [{c} + 960]\n", "vpsubd zmm15, zmm15, dword ptr [", $base, " + 60]{{1to16}}\n",
            "vmovdqu32 zmmword ptr [{c} + 960] {{{mask}}}, zmm15\n",
        )
    };
}

/// A whole 16-row `TDPB[SU][SU]D` whose A bytes are VPDPBUSD's signed operand (TDPBSUD, and
/// TDPBUUD after [`dot_int8`]'s bias): `C[m] = C[m] + sum_k VPDPBUSD(B[k], A[m][k]) - corr`
/// for the 16 rows, the dwords of C selected by `mask` written. 16 accumulators (zmm0-15)
/// cover VPDPBUSD's latency on both ports; B's row k stays in a register and each row's A dword
/// is the instruction's own broadcast memory operand, so a VPDPBUSD is one fused uop.
///
/// One asm block rather than intrinsics: the compiler's version of this loop broadcasts into a
/// register first, and took 19% longer. (When A is the unsigned operand it must be in a
/// register anyway, and the compiler's loop is as fast as an asm one.)
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 VNNI. `c` must point to 16 rows of 64 writable
/// bytes not overlapping `a` or `b`, `a` to 16 rows of 64 readable bytes (dword k of row m is
/// the broadcast A operand), `b` to `k` (<= 16) rows of 64 readable bytes.
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn full_tile_int8_a_signed(
    c: *mut u8,
    a: *const u8,
    b: *const u8,
    k: usize,
    mask: __mmask16,
    corr: __m512i,
) {
    // SAFETY: the memory operands are within the buffers the caller guarantees (C rows 0..16,
    // A dwords 0..k of rows 0..16, B rows 0..k) and `corr`, a live local read as 64 bytes;
    // zmm0-16 are declared clobbered, the pointer and counter registers are inputs or inout;
    // no stack is used.
    unsafe {
        // A's pointer in rsi, B's in rdx, the k count in rcx: named registers, as clobber_abi
        // requires of outputs.
        asm!(
            k_loop!("vmovdqu32 zmm16, zmmword ptr [rdx]"),
            add_c_and_store!("zmmword ptr [{corr}]"),
            c = in(reg) c,
            inout("rsi") a => _,
            inout("rdx") b => _,
            inout("rcx") k => _,
            mask = in(kreg) mask,
            corr = in(reg) &corr,
            // Declares zmm0-16, which the block writes, clobbered (with the other caller-saved
            // registers); no input lives in a vector register.
            clobber_abi("C"),
            options(nostack),
        );
    }
}

/// `128 * (the sum of row m's bytes in dwords 0..k)` for each row m of A (k <= 16): what
/// biasing B by 0x80 adds to row m of a TDPBSSD (see [`full_tile_int8_signed_signed`]).
/// Everything wraps mod 2^32, like the product.
///
/// Per row, one VPDPBUSD of 0x80 bytes by the row's dwords gives 16 partial sums; a
/// transposing add tree (unpack dwords, unpack qwords, then 128-bit lanes twice) turns the 16
/// vectors into one whose dword m is row m's total. About 60 instructions on the ports the
/// product needs, so they are worth computing once per A tile, not per product: the emulator
/// keeps them while the tile is unchanged.
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) fn row_corrections(a: &[u8; 1024], k: usize, out: &mut [i32; ROWS]) {
    let splat = _mm512_set1_epi32(0x8080_8080_u32 as i32);
    let live = lane_mask(k);
    let s: Panel = core::array::from_fn(|m| {
        let row = _mm512_maskz_mov_epi32(live, load_row(a, m));
        _mm512_dpbusd_epi32(_mm512_setzero_si512(), splat, row)
    });
    // Per 128-bit lane, [row 2i, row 2i+1] pairs of partial sums, then rows 4i..4i+3.
    let x: [__m512i; 8] = core::array::from_fn(|i| {
        let (p, q) = (s[2 * i], s[2 * i + 1]);
        _mm512_add_epi32(_mm512_unpacklo_epi32(p, q), _mm512_unpackhi_epi32(p, q))
    });
    let y: [__m512i; 4] = core::array::from_fn(|i| {
        let (p, q) = (x[2 * i], x[2 * i + 1]);
        _mm512_add_epi32(_mm512_unpacklo_epi64(p, q), _mm512_unpackhi_epi64(p, q))
    });
    // Adds the 128-bit lanes pairwise: [p0+p1, p2+p3, q0+q1, q2+q3].
    let lanes = |p: __m512i, q: __m512i| {
        _mm512_add_epi32(
            _mm512_shuffle_i32x4::<0b10_00_10_00>(p, q),
            _mm512_shuffle_i32x4::<0b11_01_11_01>(p, q),
        )
    };
    let total = lanes(lanes(y[0], y[1]), lanes(y[2], y[3]));
    // SAFETY: `out` is 16 writable dwords; the store is unaligned.
    unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), total) };
}

/// A whole 16-row TDPBSSD: both operands signed, so B's bytes are biased by 0x80 into
/// VPDPBUSD's unsigned operand (one VPXORD per B row, fused with its load) and each row m of
/// the result carries `128 * sum_k A[m][k]` too: `corr[m]` ([`row_corrections`]), which the
/// epilogue subtracts as a broadcast memory operand. A's dwords stay the instruction's own
/// broadcast memory operand, so the loop is TDPBSUD's ([`full_tile_int8_a_signed`]) plus 16
/// VPXORDs. 16 accumulators (zmm0-15) cover VPDPBUSD's latency on both ports.
///
/// Built this way because biasing A instead needs a VPXORD per VPDPBUSD (A is the broadcast
/// operand): 256 more instructions, about 10% of the product's time, while the corrections
/// depend on A alone and can be kept per A tile.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 VNNI. `c` must point to 16 rows of 64 writable
/// bytes not overlapping `a` or `b`, `a` to 16 rows of 64 readable bytes (dword k of row m is
/// the broadcast A operand), `b` to `k` (<= 16) rows of 64 readable bytes.
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn full_tile_int8_signed_signed(
    c: *mut u8,
    a: *const u8,
    b: *const u8,
    k: usize,
    mask: __mmask16,
    corr: &[i32; ROWS],
) {
    let splat = _mm512_set1_epi32(0x8080_8080_u32 as i32);
    // SAFETY: the memory operands are within the buffers the caller guarantees (C rows 0..16,
    // A dwords 0..k of rows 0..16, B rows 0..k) and `corr`, 16 readable dwords;
    // zmm0-31 are declared clobbered (the bias splat is an input in zmm18, which the block
    // only reads), the pointer and counter registers are inout; no stack is used.
    unsafe {
        // A's pointer in rsi, B's in rdx, the k count in rcx: named registers, as clobber_abi
        // requires of outputs.
        asm!(
            k_loop!("vpxord zmm16, zmm18, zmmword ptr [rdx]"),
            add_c_and_store!(rows: "{corr}"),
            c = in(reg) c,
            inout("rsi") a => _,
            inout("rdx") b => _,
            inout("rcx") k => _,
            in("zmm18") splat,
            mask = in(kreg) mask,
            corr = in(reg) corr,
            clobber_abi("C"),
            options(nostack),
        );
    }
}

/// A 2x2 block of integer products over `steps` k-steps (see `super::block`): for each step
/// `s`, with A0/A1 the tiles at `a + s * a_step` and `+ 1024` and B0/B1 those at
/// `b + s * b_step` and `+ 1024`, `C[2h + w] += Ah x Bw` on full tiles (16 x 16 x 16 dwords).
///
/// The same arithmetic as [`dot_int8`] (VPDPBUSD, A biased by 0x80 when both operands have the
/// same signedness) with the per-instruction costs taken out of the step loop: the
/// accumulators of 8 rows x 2 column tiles stay in registers for a chunk of 4 k-steps (each B
/// row loaded once per 8 rows, each A dword broadcast once for two products), and the bias
/// correction, which depends on the column only, is accumulated over every step and
/// subtracted once at the end (exact: everything wraps mod 2^32).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 VNNI; for every `s < steps`, the 2048 bytes at
/// `a + s * a_step` and at `b + s * b_step` must be readable.
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn dot_2x2_int8(
    c: &mut [[u8; 1024]; 4],
    (a, a_step): (*const u8, usize),
    (b, b_step): (*const u8, usize),
    steps: usize,
    signs: (bool, bool),
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { block_int8_signed(c, (a, a_step), (b, b_step), steps, signs) }
}

/// [`dot_2x2_int8`] on one row of tiles: `C[w] += A x Bw` for `w` in 0, 1 and each step in
/// order, A's step one tile (1024 bytes at `a + s * a_step`), B's two: each A dword broadcast
/// once for both products, as in the 2x2 block (a GEMM's micro-tiles of 16 rows run it).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512 VNNI; for every `s < steps`, the 1024 bytes at
/// `a + s * a_step` and the 2048 at `b + s * b_step` must be readable.
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn dot_1x2_int8(
    c: &mut [[u8; 1024]; 2],
    (a, a_step): (*const u8, usize),
    (b, b_step): (*const u8, usize),
    steps: usize,
    signs: (bool, bool),
) {
    // SAFETY: forwarded from this function's contract; a 2-tile C reads one tile of A per step.
    unsafe { block_int8_signed(c, (a, a_step), (b, b_step), steps, signs) }
}

/// [`block_int8`] for the signedness of A and B.
///
/// # Safety
/// As [`block_int8`].
#[inline]
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn block_int8_signed(
    c: &mut [[u8; 1024]],
    a: (*const u8, usize),
    b: (*const u8, usize),
    steps: usize,
    (a_signed, b_signed): (bool, bool),
) {
    // SAFETY: forwarded from this function's contract (all four calls).
    unsafe {
        match (a_signed == b_signed, b_signed) {
            (true, true) => block_int8::<true, true, true>(c, a, b, steps),
            (true, false) => block_int8::<true, true, false>(c, a, b, steps),
            (false, true) => block_int8::<false, false, true>(c, a, b, steps),
            (false, false) => block_int8::<false, false, false>(c, a, b, steps),
        }
    }
}

/// [`dot_2x2_int8`] for TDPBSSD with A already biased: every byte of A's steps is A's byte
/// XOR 0x80, as a GEMM packs it once per block for all the blocks that reuse it. The kernel
/// then skips its own biased copy of A and applies the same correction.
///
/// # Safety
/// As [`dot_2x2_int8`].
#[target_feature(enable = "avx512f,avx512vnni")]
pub(super) unsafe fn dot_2x2_tdpbssd_a_biased(
    c: &mut [[u8; 1024]; 4],
    a: (*const u8, usize),
    b: (*const u8, usize),
    steps: usize,
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { block_int8::<false, true, true>(c, a, b, steps) }
}

/// [`dot_2x2_int8`] (4 C tiles) or [`dot_1x2_int8`] (2) for one signedness: `c` holds the C
/// tiles of `c.len() / 2` rows of tiles, tile `2h + w` of A's tile h and B's tile w. `BIAS_A`
/// when the kernel biases A by 0x80 itself, `CORRECT` when A is biased (by the kernel, or by
/// the caller: same signedness) so the correction applies, `A_IS_U8` when A's (biased) bytes
/// are VPDPBUSD's unsigned operand (B signed).
///
/// # Safety
/// As [`dot_2x2_int8`], with `c.len()` 2 or 4 and A's step `c.len() / 2` tiles.
#[target_feature(enable = "avx512f,avx512vnni")]
unsafe fn block_int8<const BIAS_A: bool, const CORRECT: bool, const A_IS_U8: bool>(
    c: &mut [[u8; 1024]],
    (a, a_step): (*const u8, usize),
    (b, b_step): (*const u8, usize),
    steps: usize,
) {
    /// Rows of C per register group: 8 rows x 2 column tiles = 16 accumulators, enough
    /// independent chains for VPDPBUSD's latency on both ports.
    const G: usize = 8;
    /// Steps per visit of a register group: the accumulators are loaded and stored once per
    /// chunk rather than once per step (a chunk of biased A is 8 KiB, in L1).
    const CHUNK: usize = 4;
    let heights = c.len() / 2;
    let splat = _mm512_set1_epi32(0x8080_8080_u32 as i32);
    // A chunk's A (the tiles of each step, up to 32 rows of 64 bytes), biased when BIAS_A.
    let mut biased = [[_mm512_setzero_si512(); 2 * ROWS]; CHUNK];
    // The correction of each column tile, in two chains each.
    let mut corr = [[_mm512_setzero_si512(); 2]; 2];
    for s0 in (0..steps).step_by(CHUNK) {
        let chunk = CHUNK.min(steps - s0);
        // Callers pass j < chunk, so s0 + j < steps and the step's bytes are readable (the
        // contract); row r < 16 * heights of A, row k < 16 of B tile w < 2 lie inside them.
        let row_a = |j: usize, r: usize| {
            // SAFETY: see above.
            unsafe { _mm512_loadu_si512(a.add((s0 + j) * a_step + r * 64).cast()) }
        };
        let row_b = |j: usize, w: usize, k: usize| {
            // SAFETY: see above.
            unsafe { _mm512_loadu_si512(b.add((s0 + j) * b_step + w * 1024 + k * 64).cast()) }
        };
        if CORRECT {
            for (j, rows) in biased.iter_mut().enumerate().take(chunk) {
                if BIAS_A {
                    for (r, v) in rows.iter_mut().enumerate().take(heights * ROWS) {
                        *v = _mm512_xor_si512(row_a(j, r), splat);
                    }
                }
                for k in 0..ROWS {
                    for (w, chains) in corr.iter_mut().enumerate() {
                        let acc = &mut chains[k % 2];
                        *acc = if A_IS_U8 {
                            _mm512_dpbusd_epi32(*acc, splat, row_b(j, w, k))
                        } else {
                            _mm512_dpbusd_epi32(*acc, row_b(j, w, k), splat)
                        };
                    }
                }
            }
        }
        // Byte `at` of step j's (biased) A.
        let a_dword = |j: usize, at: usize| -> i32 {
            let base: *const u8 = if BIAS_A {
                biased[j].as_ptr().cast()
            } else {
                // SAFETY: as in `row_a`.
                unsafe { a.add((s0 + j) * a_step) }
            };
            // SAFETY: `at` + 4 <= 1024 * heights, inside the step's (biased) A.
            unsafe { base.add(at).cast::<i32>().read_unaligned() }
        };
        // The next chunk's A and B, 2 x 64 lines per step, are prefetched while this chunk
        // computes, one line per k iteration (there are 4 x 16 iterations per step): in a GEMM
        // they come from L2, and the prefetchers do not run far enough ahead on their own.
        let next = CHUNK.min(steps - s0 - chunk);
        let mut line = 0usize;
        let mut prefetch = || {
            let (which, l) = (line / (CHUNK * 32), line % (CHUNK * 32));
            let (j, at) = (l / 32, (l % 32) * 64);
            // A has 16 lines per tile of its step: a row of tiles prefetches only its own.
            if j < next && (which == 0 || at < heights * 1024) {
                let base = if which == 0 { (b, b_step) } else { (a, a_step) };
                // A prefetch never faults; wrapping arithmetic keeps the address computation
                // defined (it stays inside the operand: step s0 + chunk + j < steps).
                let p = base.0.wrapping_add((s0 + chunk + j) * base.1 + at);
                _mm_prefetch::<_MM_HINT_T0>(p.cast());
            }
            line += 1;
        };
        for h in 0..heights {
            for m0 in (0..ROWS).step_by(G) {
                let Some([c_left, c_right]) = c.get_mut(2 * h..2 * h + 2) else {
                    return; // h < heights = c.len() / 2: never
                };
                let mut acc = [[_mm512_setzero_si512(); 2]; G];
                for (j, pair) in acc.iter_mut().enumerate() {
                    pair[0] = load_row(c_left, m0 + j);
                    pair[1] = load_row(c_right, m0 + j);
                }
                for j in 0..chunk {
                    for k in 0..ROWS {
                        prefetch();
                        let (b0, b1) = (row_b(j, 0, k), row_b(j, 1, k));
                        for (r, pair) in acc.iter_mut().enumerate() {
                            let av =
                                _mm512_set1_epi32(a_dword(j, h * 1024 + (m0 + r) * 64 + k * 4));
                            if A_IS_U8 {
                                pair[0] = _mm512_dpbusd_epi32(pair[0], av, b0);
                                pair[1] = _mm512_dpbusd_epi32(pair[1], av, b1);
                            } else {
                                pair[0] = _mm512_dpbusd_epi32(pair[0], b0, av);
                                pair[1] = _mm512_dpbusd_epi32(pair[1], b1, av);
                            }
                        }
                    }
                }
                for (j, pair) in acc.iter().enumerate() {
                    store_row_masked(c_left, m0 + j, 0xFFFF, pair[0]);
                    store_row_masked(c_right, m0 + j, 0xFFFF, pair[1]);
                }
            }
        }
    }
    if CORRECT && steps > 0 {
        let corr = [
            _mm512_add_epi32(corr[0][0], corr[0][1]),
            _mm512_add_epi32(corr[1][0], corr[1][1]),
        ];
        for (t, tile) in c.iter_mut().enumerate() {
            for r in 0..ROWS {
                let v = _mm512_sub_epi32(load_row(tile, r), corr[t % 2]);
                store_row_masked(tile, r, 0xFFFF, v);
            }
        }
    }
}

/// The two tiles of k-step `s` of an operand whose steps are `stride` bytes apart; `None`
/// past its end.
fn step_tiles(x: &[u8], stride: usize, s: usize) -> Option<[&[u8; 1024]; 2]> {
    Some([
        super::block::tile(x, stride, s, 0)?,
        super::block::tile(x, stride, s, 1)?,
    ])
}

/// The four C tiles of a 2x2 block as two columns of 32 rows: `[C00; C10]` then `[C01; C11]`
/// (row `m` of column `w` at `w * 2048 + m * 64`), the layout [`block_kernel`] reads and
/// writes.
#[repr(C, align(64))]
struct Columns([u8; 4096]);

impl Columns {
    /// The block's tiles in this layout.
    fn of(c: &[[u8; 1024]; 4]) -> Columns {
        let mut cols = Columns([0; 4096]);
        for (i, tile) in c.iter().enumerate() {
            let at = (i % 2) * 2048 + (i / 2) * 1024;
            cols.0[at..at + 1024].copy_from_slice(tile);
        }
        cols
    }

    /// One row of tiles (`C0`, `C1`) as the top half of each column; the bottom halves, which
    /// [`block_kernel`] leaves alone when it runs four row groups, are zero.
    fn of_row(c: &[[u8; 1024]; 2]) -> Columns {
        let mut cols = Columns([0; 4096]);
        for (w, tile) in c.iter().enumerate() {
            cols.0[w * 2048..w * 2048 + 1024].copy_from_slice(tile);
        }
        cols
    }

    /// Copies the top half of each column back into `C0`, `C1`.
    fn write_row_to(&self, c: &mut [[u8; 1024]; 2]) {
        for (w, tile) in c.iter_mut().enumerate() {
            *tile = *self.tile(0, w);
        }
    }

    /// Tile `2h + w` of the block.
    fn tile(&self, h: usize, w: usize) -> &[u8; 1024] {
        let at = w * 2048 + h * 1024;
        self.0[at..at + 1024].try_into().unwrap_or(&[0; 1024])
    }

    /// Copies the block back into the four tiles.
    fn write_to(&self, c: &mut [[u8; 1024]; 4]) {
        for (i, tile) in c.iter_mut().enumerate() {
            *tile = *self.tile(i / 2, i % 2);
        }
    }

    /// Whether any lane of the block is a NaN.
    #[target_feature(enable = "avx512f")]
    fn any_nan(&self) -> bool {
        self.0.chunks_exact(64).any(|row| {
            // SAFETY: `row` is 64 readable bytes; the load is unaligned.
            let f = _mm512_castsi512_ps(unsafe { _mm512_loadu_si512(row.as_ptr().cast()) });
            _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(0xFFFF, f, f) != 0
        })
    }
}

/// One k-step's operands converted to fp32 for [`block_kernel`], 128 rows of 64 bytes: rows
/// 0..32 the even elements of A's 32 rows, 32..64 their odd elements, then even B0, odd B0,
/// even B1, odd B1 (16 rows each).
type Converted = [MaybeUninit<__m512i>; 8 * ROWS];

/// Converts k-step `s` into `out`: A's first `H` tiles (2 for a block, 1 for a row of tiles)
/// and B's two; `false` (nothing written) when the step does not lie inside the operands.
#[inline]
#[target_feature(enable = "avx512f")]
fn convert_step<const H: usize>(
    out: &mut Converted,
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    s: usize,
    half: Half,
) -> bool {
    let mut a_tiles = [&[0u8; 1024]; H];
    for (h, t) in a_tiles.iter_mut().enumerate() {
        match super::block::tile(a, a_step, s, h) {
            Some(tile) => *t = tile,
            None => return false,
        }
    }
    let Some(b_tiles) = step_tiles(b, b_step, s) else {
        return false;
    };
    convert_tiles(out, a_tiles, b_tiles, half);
    true
}

/// Converts `H` (1 or 2) A tiles and B's two tiles of a step into `out`; A's rows from
/// `16 x H` on in each half are left as they were (one row of tiles has only tile 0).
#[inline]
#[target_feature(enable = "avx512f")]
fn convert_tiles<const H: usize>(
    out: &mut Converted,
    a_tiles: [&[u8; 1024]; H],
    b_tiles: [&[u8; 1024]; 2],
    half: Half,
) {
    let (a_rows, b_rows) = out.split_at_mut(4 * ROWS);
    for (h, tile) in a_tiles.into_iter().enumerate() {
        for r in 0..ROWS {
            let (even, odd) = split(load_row(tile, r), half);
            a_rows[h * ROWS + r].write(even);
            a_rows[2 * ROWS + h * ROWS + r].write(odd);
        }
    }
    for (w, tile) in b_tiles.into_iter().enumerate() {
        for r in 0..ROWS {
            let (even, odd) = split(load_row(tile, r), half);
            b_rows[w * 2 * ROWS + r].write(even);
            b_rows[w * 2 * ROWS + ROWS + r].write(odd);
        }
    }
}

/// A 2x2 block of floating-point products over `steps` k-steps (see `super::block`), with
/// the arithmetic of [`dot_half`]: per step, A (both tiles) and B (both tiles) are converted
/// to fp32 once rather than once per instruction, and the four products are one
/// [`block_kernel`] pass. Lanes that end in a NaN are recomputed by the exact model from the
/// step's operands, as in [`dot_half`].
///
/// # Safety
/// The CPU must support AVX-512F; the function reads only whole steps inside `a` and `b`
/// (through checked slices) and stops at the first step that does not fit.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dot_2x2_half(
    c: &mut [[u8; 1024]; 4],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    half: Half,
) {
    // SAFETY: forwarded from this function's contract (all calls).
    unsafe {
        let done = match half {
            Half::Bf16 => half_block_fast::<false>(c, a, b, steps, super::bf16_pairs()),
            Half::Fp16 => half_block_fast::<true>(c, a, b, steps, false),
        };
        if !done {
            half_block_exact(c, a, b, steps, half);
        }
    }
}

/// [`block_kernel`]'s row groups (four rows of A each) for a 2x2 block: both A tiles.
const BLOCK_GROUPS: usize = 2 * ROWS / 4;

/// One row of a 2x2 block of floating-point products: `C[w] += A x Bw` for `w` in 0, 1 and
/// each step in order, A's step one tile at `s * a_step`, B's two, with the bits of
/// [`dot_half`] run product by product; B's steps are prefetched a step ahead: a
/// GEMM with M = 16 runs this, and reads each byte of B once. Stops at the first step that
/// does not lie inside the operands.
///
/// Per step A and B are converted once and both products are one [`block_kernel`] pass on
/// its top row groups, as [`half_block_fast`] does for the block; where a lane ends in a NaN
/// the row is redone product by product by [`dot_half`], NaN lanes by the exact model. Two
/// [`dot_half`] calls per step converted A twice, switched MXCSR twice, and their kernel
/// broadcasts each A element once per product (18 loads per 16 FMAs, against 12 in
/// [`block_kernel`]): the row reached about 57% of the FMA peak that way, 75% this way.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dot_1x2_half(
    c: &mut [[u8; 1024]; 2],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    half: Half,
) {
    // SAFETY: forwarded from this function's contract (all calls).
    unsafe {
        let done = match half {
            Half::Bf16 => row_fast::<false>(c, a, b, steps, super::bf16_pairs()),
            Half::Fp16 => row_fast::<true>(c, a, b, steps, false),
        };
        if !done {
            row_exact(c, a, b, steps, half);
        }
    }
}

/// [`dot_1x2_half`] when no lane of C is a NaN at the end, for one format; `false`, with `c`
/// untouched, when a lane ends in a NaN. One test at the end is enough for the reason given
/// at [`half_block_fast`]. The converted A takes rows 0..16 of each half of A's part of
/// [`Converted`]; rows 16..32 are never written nor read. Visible to the tests, which check
/// that NaN-free operands never leave it.
///
/// # Safety
/// As [`dot_1x2_half`]; `pairs` only where [`pairs_available`].
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn row_fast<const FP16: bool>(
    c: &mut [[u8; 1024]; 2],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    pairs: bool,
) -> bool {
    let mut cols = Columns::of_row(c);
    // SAFETY: forwarded from this function's contract.
    unsafe { fused_steps::<FP16, 1>(&mut cols, a, b, steps, pairs) };
    if cols.any_nan() {
        return false;
    }
    cols.write_row_to(c);
    true
}

/// [`dot_1x2_half`] product by product on [`dot_half`], which recomputes NaN lanes exactly.
///
/// # Safety
/// As [`dot_1x2_half`].
#[cold]
#[target_feature(enable = "avx512f")]
unsafe fn row_exact(
    c: &mut [[u8; 1024]; 2],
    (a, a_step): (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    half: Half,
) {
    for s in 0..steps {
        let (Some(at), Some(bt)) = (super::block::tile(a, a_step, s, 0), step_tiles(b.0, b.1, s))
        else {
            return;
        };
        for (ct, bt) in c.iter_mut().zip(bt) {
            // SAFETY: the CPU supports AVX-512F (this function's contract).
            unsafe { dot_half(ct, at, bt, ROWS, DWORDS, ROWS, half) };
        }
    }
}

/// [`dot_2x2_half`] when no lane of C is a NaN at the end, for one format (`FP16` or bf16, so
/// that the conversion has no branch): each step converted, then run in place, with no NaN
/// test per step; bf16 with `pairs` on VDPBF16PS, else on FMAs ([`fused_steps`]). Returns
/// `false`, with `c` untouched, when a lane ends in a NaN: then [`half_block_exact`] redoes the
/// block.
///
/// Why one test at the end is enough: a NaN lane stays a NaN through every later step (C +
/// x is a NaN when C is one), so a block without a NaN at the end had none after any step, and
/// on lanes that are not NaNs the kernel's result is the exact one (see [`dot_half`]).
///
/// One step per kernel call (an MXCSR switch each): converting two steps ahead (16 KiB of
/// operands) made a block 3% slower, four (32 KiB) 15%, as the converted operands and the
/// streamed A and B no longer fit in L1 together.
///
/// # Safety
/// As [`dot_2x2_half`]; `pairs` only where [`pairs_available`].
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn half_block_fast<const FP16: bool>(
    c: &mut [[u8; 1024]; 4],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    pairs: bool,
) -> bool {
    let mut cols = Columns::of(c);
    // SAFETY: forwarded from this function's contract.
    unsafe { fused_steps::<FP16, 2>(&mut cols, a, b, steps, pairs) };
    if cols.any_nan() {
        return false;
    }
    cols.write_to(c);
    true
}

/// The k-loop of [`half_block_fast`] (`H` = 2 rows of tiles) and [`row_fast`] (`H` = 1): per
/// step, B's lines a step on asked for, A's `H` tiles and B's two converted
/// (`FP16` or bf16, so that the conversion has no branch) or, bf16 with `pairs`, re-paired
/// ([`pair_step`]), then one [`block_kernel`] pass in place on the first `16 H` rows of each
/// column of `cols`, on FMAs or VDPBF16PS. Stops at the first step that does not lie inside
/// the operands.
///
/// # Safety
/// The CPU must support AVX-512F, and AVX512BW and AVX512_BF16 with `pairs`
/// ([`pairs_available`]); `H` is 1 or 2.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn fused_steps<const FP16: bool, const H: usize>(
    cols: &mut Columns,
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    pairs: bool,
) {
    let half = if FP16 { Half::Fp16 } else { Half::Bf16 };
    let pairs = pairs && !FP16;
    // Written by each step's conversion before the kernel reads it, never zero-filled (a zero
    // fill would cost as many stores as the conversion). With one row of tiles, rows 16..32 of
    // each half of A's part are never written nor read; re-paired operands take the first
    // half of the buffer ([`Paired`]).
    let mut ops = [MaybeUninit::<__m512i>::uninit(); 8 * ROWS];
    for s in 0..steps {
        // B's lines of a step ahead, into L2: this iteration's conversion reads step s's,
        // so step s + 1 is the next not yet on its way (see `super::block::prefetch_b_step`).
        super::block::prefetch_b_step(b.0, b.1, s + super::block::B_LEAD);
        let ready = if pairs {
            ops.first_chunk_mut::<{ 4 * ROWS }>().is_some_and(|paired| {
                // SAFETY: with `pairs` the CPU has AVX512BW (this function's contract).
                unsafe { pair_step::<H>(paired, a, b, s) }
            })
        } else {
            convert_step::<H>(&mut ops, a, b, s, half)
        };
        if !ready {
            break;
        }
        let (op, cp) = (ops.as_ptr().cast(), cols.0.as_mut_ptr());
        // SAFETY: `ops` holds the step converted or re-paired just now, all that `H * ROWS / 4`
        // row groups read (A's rows 0..16 H, all of B's); `cols` is 4096 bytes, read and
        // written in place (the kernel allows it), and nothing else accesses these buffers
        // during the call. The CPU supports AVX-512F, and AVX512_BF16 with `pairs` (this
        // function's contract).
        unsafe {
            if pairs {
                block_kernel::<true>(op, cp, cp, H * ROWS / 4);
            } else {
                block_kernel::<false>(op, cp, cp, H * ROWS / 4);
            }
        }
    }
}

/// [`dot_2x2_half`] step by step with every NaN lane recomputed by the exact model from the
/// step's operands, as in [`dot_half`]. C lives in two [`Columns`] buffers used in turn: a
/// step reads one and writes the other, so the old C of a NaN lane is still there for the
/// exact model, and nothing is copied.
///
/// # Safety
/// As [`dot_2x2_half`].
#[cold]
#[target_feature(enable = "avx512f")]
unsafe fn half_block_exact(
    c: &mut [[u8; 1024]; 4],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    half: Half,
) {
    let mut bufs = [Columns::of(c), Columns([0; 4096])];
    let mut cur = 0;
    let mut ops = [MaybeUninit::<__m512i>::uninit(); 8 * ROWS];
    for s in 0..steps {
        if !convert_step::<2>(&mut ops, a, b, s, half) {
            break;
        }
        let [first, second] = &mut bufs;
        let (old, new) = if cur == 0 {
            (&*first, second)
        } else {
            (&*second, first)
        };
        // SAFETY: `ops` was converted just now; `old` and `new` are 4096 bytes each, distinct
        // live locals that nothing else accesses during the call. The CPU supports AVX-512F
        // (this function's contract).
        unsafe {
            block_kernel::<false>(
                ops.as_ptr().cast(),
                old.0.as_ptr(),
                new.0.as_mut_ptr(),
                BLOCK_GROUPS,
            )
        };
        let (Some(a_tiles), Some(b_tiles)) = (step_tiles(a.0, a.1, s), step_tiles(b.0, b.1, s))
        else {
            break; // converted above, so unreachable
        };
        for (i, row) in new.0.chunks_exact_mut(64).enumerate() {
            // SAFETY: `row` is 64 readable bytes; the load is unaligned.
            let v = unsafe { _mm512_loadu_si512(row.as_ptr().cast()) };
            let f = _mm512_castsi512_ps(v);
            let nan = _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(0xFFFF, f, f);
            if nan != 0 {
                let (w, h, r) = (i / (2 * ROWS), (i / ROWS) % 2, i % ROWS);
                let c_tile = old.tile(h, w);
                let v = fix_nan_lanes(v, c_tile, a_tiles[h], b_tiles[w], r, nan, ROWS, half);
                // SAFETY: `row` is 64 writable bytes; the store is unaligned.
                unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), v) };
            }
        }
        cur ^= 1;
    }
    bufs[cur].write_to(c);
}

/// The asm of [`block_kernel`], for one multiply instruction (`$op`: VFMADD231PS on widened
/// operands, VDPBF16PS on re-paired ones) run `$steps` times per chain (16 k-steps, or 8 pairs
/// of them), in one operand layout ([`Converted`] or [`Paired`]): `a` the offsets of the odd
/// lane's dword for A's rows 0 to 3 of a group (the even lane's are at 0, 64, 128, 192),
/// `$a_next` the bytes from where the k loop leaves A's pointer to the next group's first row
/// (256 minus the loop's 4 bytes per iteration), `b` B's first row's offset from A's and the
/// offsets of the other three vectors of a step from the first, `$b_step` the bytes between
/// steps.
macro_rules! block_pass {
    (
        $op:literal, $steps:literal, a: [$ao0:literal, $ao1:literal, $ao2:literal, $ao3:literal],
        $a_next:literal, b: [$b0:literal, $b1:literal, $b2:literal, $b3:literal], $b_step:literal,
        $csr:expr, $ops:expr, $c:expr, $out:expr, $groups:expr
    ) => {
        asm!(
            "vstmxcsr dword ptr [{csr}]",
            "vldmxcsr dword ptr [{csr} + 4]",
            concat!("lea r10, [rsi + ", $b0, "]"),
            "4:",
            "mov r8, r10",
            concat!("mov rcx, ", $steps),
            "vxorps xmm0, xmm0, xmm0",
            "vxorps xmm1, xmm1, xmm1",
            "vxorps xmm2, xmm2, xmm2",
            "vxorps xmm3, xmm3, xmm3",
            "vxorps xmm4, xmm4, xmm4",
            "vxorps xmm5, xmm5, xmm5",
            "vxorps xmm6, xmm6, xmm6",
            "vxorps xmm7, xmm7, xmm7",
            "vxorps xmm8, xmm8, xmm8",
            "vxorps xmm9, xmm9, xmm9",
            "vxorps xmm10, xmm10, xmm10",
            "vxorps xmm11, xmm11, xmm11",
            "vxorps xmm12, xmm12, xmm12",
            "vxorps xmm13, xmm13, xmm13",
            "vxorps xmm14, xmm14, xmm14",
            "vxorps xmm15, xmm15, xmm15",
            "2:",
            "vmovups zmm16, zmmword ptr [r8]",
            concat!("vmovups zmm17, zmmword ptr [r8 + ", $b1, "]"),
            concat!("vmovups zmm18, zmmword ptr [r8 + ", $b2, "]"),
            concat!("vmovups zmm19, zmmword ptr [r8 + ", $b3, "]"),
            "vbroadcastss zmm20, dword ptr [rsi]",
            concat!("vbroadcastss zmm21, dword ptr [rsi + ", $ao0, "]"),
            concat!($op, " zmm0, zmm16, zmm20"),
            concat!($op, " zmm1, zmm17, zmm21"),
            concat!($op, " zmm2, zmm18, zmm20"),
            concat!($op, " zmm3, zmm19, zmm21"),
            "vbroadcastss zmm22, dword ptr [rsi + 64]",
            concat!("vbroadcastss zmm23, dword ptr [rsi + ", $ao1, "]"),
            concat!($op, " zmm4, zmm16, zmm22"),
            concat!($op, " zmm5, zmm17, zmm23"),
            concat!($op, " zmm6, zmm18, zmm22"),
            concat!($op, " zmm7, zmm19, zmm23"),
            "vbroadcastss zmm20, dword ptr [rsi + 128]",
            concat!("vbroadcastss zmm21, dword ptr [rsi + ", $ao2, "]"),
            concat!($op, " zmm8, zmm16, zmm20"),
            concat!($op, " zmm9, zmm17, zmm21"),
            concat!($op, " zmm10, zmm18, zmm20"),
            concat!($op, " zmm11, zmm19, zmm21"),
            "vbroadcastss zmm22, dword ptr [rsi + 192]",
            concat!("vbroadcastss zmm23, dword ptr [rsi + ", $ao3, "]"),
            concat!($op, " zmm12, zmm16, zmm22"),
            concat!($op, " zmm13, zmm17, zmm23"),
            concat!($op, " zmm14, zmm18, zmm22"),
            concat!($op, " zmm15, zmm19, zmm23"),
            concat!("add r8, ", $b_step),
            "add rsi, 4",
            "dec rcx",
            "jnz 2b",
            // Per row: te + to, then C + that, for column 0 (C at +0) and column 1 (+2048).
            // The operand order only matters for NaNs, which the caller recomputes exactly.
            "vaddps zmm0, zmm0, zmm1",
            "vaddps zmm0, zmm0, zmmword ptr [rdi + 0]",
            "vmovups zmmword ptr [rdx + 0], zmm0",
            "vaddps zmm2, zmm2, zmm3",
            "vaddps zmm2, zmm2, zmmword ptr [rdi + 2048]",
            "vmovups zmmword ptr [rdx + 2048], zmm2",
            "vaddps zmm4, zmm4, zmm5",
            "vaddps zmm4, zmm4, zmmword ptr [rdi + 64]",
            "vmovups zmmword ptr [rdx + 64], zmm4",
            "vaddps zmm6, zmm6, zmm7",
            "vaddps zmm6, zmm6, zmmword ptr [rdi + 2112]",
            "vmovups zmmword ptr [rdx + 2112], zmm6",
            "vaddps zmm8, zmm8, zmm9",
            "vaddps zmm8, zmm8, zmmword ptr [rdi + 128]",
            "vmovups zmmword ptr [rdx + 128], zmm8",
            "vaddps zmm10, zmm10, zmm11",
            "vaddps zmm10, zmm10, zmmword ptr [rdi + 2176]",
            "vmovups zmmword ptr [rdx + 2176], zmm10",
            "vaddps zmm12, zmm12, zmm13",
            "vaddps zmm12, zmm12, zmmword ptr [rdi + 192]",
            "vmovups zmmword ptr [rdx + 192], zmm12",
            "vaddps zmm14, zmm14, zmm15",
            "vaddps zmm14, zmm14, zmmword ptr [rdi + 2240]",
            "vmovups zmmword ptr [rdx + 2240], zmm14",
            // The next four rows: A's, C's, out's.
            concat!("add rsi, ", $a_next),
            "add rdi, 256",
            "add rdx, 256",
            "dec r9",
            "jnz 4b",
            "vldmxcsr dword ptr [{csr}]",
            csr = in(reg) $csr,
            // Named registers, as clobber_abi requires of outputs: A's pointer in rsi, C's
            // in rdi, out's in rdx, B's row pointer in r8 (B's start in r10), the k count in
            // rcx, the row groups in r9.
            inout("rsi") $ops => _,
            inout("rdi") $c => _,
            inout("rdx") $out => _,
            out("r8") _,
            out("r10") _,
            out("rcx") _,
            inout("r9") $groups => _,
            clobber_abi("C"),
            options(nostack),
        )
    };
}

/// One k-step of a 2x2 block of floating-point products on full tiles, under [`MXCSR_AMX`]:
/// for each of the first `4 x groups` rows `m` of A (32 for the block, 16 for one row of
/// tiles) and each column `w` of C, `out[w][m] = c[w][m] + (te + to)` with `te = sum_k
/// fma(ae[m][k], be_w[k])` and likewise `to`, starting from +0.
///
/// Four rows at a time: per row four accumulators (te and to of both columns, 16 chains in
/// all), B's four converted rows in registers, and each A element broadcast once for two
/// products: 12 loads per 16 FMAs, where one column at a time needs 18. One asm block, MXCSR
/// switch and restore included (see [`groups_kernel`]).
///
/// With `PAIRS` the operands are re-paired bf16 ([`pair_step`]) and each chain runs 8
/// VDPBF16PS, two of its k-steps each ([`super::pairs`]), instead of 16 FMAs: the same
/// result (VDPBF16PS does not read MXCSR; the switch serves the final additions, section
/// 10's add32 under DAZ and FTZ).
///
/// # Safety
/// The CPU must support AVX-512F, and AVX512_BF16 with `PAIRS`; `groups` is 1..=8. `ops`
/// must point to one [`Converted`] step (8 KiB; B's rows and A's rows `0..4 x groups` of
/// each half written), or with `PAIRS` one [`Paired`] step (4 KiB; B's rows and A's rows
/// `0..4 x groups` written), `c` to 4096 readable bytes and `out` to 4096 writable bytes in the
/// [`Columns`] layout; `out` overlaps nothing else except that it may be `c` itself. Rows of C
/// and `out` from `4 x groups` on are neither read nor written.
#[target_feature(enable = "avx512f")]
unsafe fn block_kernel<const PAIRS: bool>(
    ops: *const u8,
    c: *const u8,
    out: *mut u8,
    groups: usize,
) {
    let mut csr = [0u32, MXCSR_AMX];
    let csr = csr.as_mut_ptr();
    // SAFETY: the memory operands lie in the buffers the caller guarantees (Converted: A
    // rows 0..64 at dword offsets < 16, of which the first 4 x groups of each half are read,
    // and B rows 64..128; Paired: A rows 0..32 at dword offsets < 16, of which the first
    // 4 x groups are read, and B rows 32..64; C and out rows 0..4 x groups of each 2048-byte
    // column); each row of C is read before the same row of `out` is written and never after,
    // so `c == out` is sound; `csr` points to a live local the block saves MXCSR into and
    // restores it from before exiting; every vector register it writes is declared clobbered
    // (clobber_abi), the pointer and counter registers are inout or outputs; no stack is
    // used. The instructions are ones the CPU supports (this function's contract).
    unsafe {
        if PAIRS {
            block_pass!(
                "vdpbf16ps", "8", a: ["32", "96", "160", "224"], "224",
                b: ["2048", "64", "128", "192"], "256", csr, ops, c, out, groups
            );
        } else {
            block_pass!(
                "vfmadd231ps", "16", a: ["2048", "2112", "2176", "2240"], "192",
                b: ["4096", "1024", "2048", "3072"], "64", csr, ops, c, out, groups
            );
        }
    }
}

/// One k-step's bf16 operands re-paired for [`block_kernel`]`::<true>`, 64 rows of 64 bytes.
/// Rows 0..32 are A's 32 rows re-paired ([`pair_a_row`]); rows 32..64 are B's, four per pair
/// `p` of B rows: B0's even lane, B0's odd lane, B1's even, B1's odd ([`pair_b_rows`]).
type Paired = [MaybeUninit<__m512i>; 4 * ROWS];

/// The word permutation that re-pairs a row of A for the VDPBF16PS kernels: output word `j` is
/// input element `A_PAIRS[j]`. Dword `p` (< 8) holds the even lane's elements `4p + 2` (low
/// half) and `4p` (high half), which are its k-steps `2p + 1` and `2p`, since VDPBF16PS adds
/// the high half's product first ([`super::pairs`]); dword `8 + p` the odd lane's elements
/// `4p + 3` and `4p + 1`.
const A_PAIRS: [u16; 32] = {
    let mut idx = [0u16; 32];
    let mut j = 0;
    while j < 32 {
        let (lane, p) = (j / 16, (j % 16) / 2);
        idx[j] = (4 * p + lane + if j % 2 == 1 { 0 } else { 2 }) as u16;
        j += 1;
    }
    idx
};

/// Row `r` of A re-paired (see [`A_PAIRS`]): the even lane's 8 pair dwords, then the odd
/// lane's.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn pair_a_row(tile: &[u8; 1024], r: usize) -> __m512i {
    // SAFETY: A_PAIRS is 64 readable bytes; the load is unaligned.
    let idx = unsafe { _mm512_loadu_si512(A_PAIRS.as_ptr().cast()) };
    _mm512_permutexvar_epi16(idx, load_row(tile, r))
}

/// Rows `2p` and `2p + 1` of B re-paired: dword `n` of the even lane's vector holds row
/// `2p + 1`'s element `2n` (low half) beside row `2p`'s (high half), the odd lane's their
/// elements `2n + 1`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn pair_b_rows(tile: &[u8; 1024], p: usize) -> (__m512i, __m512i) {
    // The odd words (high halves) from row 2p, the even words from row 2p + 1.
    const HIGH: u32 = 0xAAAA_AAAA;
    let (x, y) = (load_row(tile, 2 * p), load_row(tile, 2 * p + 1));
    (
        _mm512_mask_blend_epi16(HIGH, y, _mm512_slli_epi32::<16>(x)),
        _mm512_mask_blend_epi16(HIGH, _mm512_srli_epi32::<16>(y), x),
    )
}

/// Re-pairs step `s` into `out` ([`Paired`]): A's first `H` tiles and B's two; `false`
/// (nothing written) when the step does not lie inside the operands.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn pair_step<const H: usize>(
    out: &mut Paired,
    (a, a_step): (&[u8], usize),
    (b, b_step): (&[u8], usize),
    s: usize,
) -> bool {
    let mut a_tiles = [&[0u8; 1024]; H];
    for (h, t) in a_tiles.iter_mut().enumerate() {
        match super::block::tile(a, a_step, s, h) {
            Some(tile) => *t = tile,
            None => return false,
        }
    }
    let Some(b_tiles) = step_tiles(b, b_step, s) else {
        return false;
    };
    let (a_rows, b_rows) = out.split_at_mut(2 * ROWS);
    for (h, tile) in a_tiles.into_iter().enumerate() {
        for r in 0..ROWS {
            a_rows[h * ROWS + r].write(pair_a_row(tile, r));
        }
    }
    for p in 0..ROWS / 2 {
        for (w, tile) in b_tiles.into_iter().enumerate() {
            let (even, odd) = pair_b_rows(tile, p);
            b_rows[4 * p + 2 * w].write(even);
            b_rows[4 * p + 2 * w + 1].write(odd);
        }
    }
    true
}

/// The even and odd elements of each dword of `x`, as fp32 bit patterns.
#[inline]
#[target_feature(enable = "avx512f")]
fn split(x: __m512i, half: Half) -> (__m512i, __m512i) {
    match half {
        Half::Bf16 => (
            _mm512_slli_epi32::<16>(x),
            _mm512_and_si512(x, _mm512_set1_epi32(0xFFFF_0000_u32 as i32)),
        ),
        // VCVTPH2PS is exact (fp16 denormals become normal fp32, never DAZ'd). It quiets
        // signalling NaNs, which does not matter: NaN lanes are recomputed exactly.
        Half::Fp16 => {
            let even = _mm512_cvtepi32_epi16(x);
            let odd = _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(x));
            (
                _mm512_castps_si512(_mm512_cvtph_ps(even)),
                _mm512_castps_si512(_mm512_cvtph_ps(odd)),
            )
        }
    }
}

/// TDPBF16PS/TDPFP16PS: per row of C, two 16-lane fp32 accumulators (te, to) take one
/// VFMADD231PS per k each, with the A element broadcast from memory and B's converted row in a
/// register; then `C + (te + to)`. See the module comment for why this is exact.
///
/// # Safety
/// The CPU must support AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dot_half(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    // SAFETY: the CPU supports AVX-512F (this function's contract).
    unsafe {
        // A GEMV's tiles, or a few tokens': B's rows are read once or twice, so they are
        // converted in registers.
        let shape = (m_rows, n_dwords, k_dwords);
        if m_rows == 1 {
            half_few_rows::<1>(c, a, b, shape, half)
        } else if m_rows == 2 {
            half_few_rows::<2>(c, a, b, shape, half)
        } else if m_rows <= 4 {
            half_few_rows::<4>(c, a, b, shape, half)
        } else if m_rows <= GROUP {
            // One group of rows (a GEMV's edge tiles have one): A's other rows are not read.
            half_rows::<GROUP>(c, a, b, (m_rows, n_dwords, k_dwords), half)
        } else {
            half_rows::<ROWS>(c, a, b, (m_rows, n_dwords, k_dwords), half)
        }
    }
}

/// The asm of [`half_few_rows`]: `$convert` turns B's row k in zmm16 into its even elements
/// in zmm17 and its odd ones in zmm16, as fp32; then each row `(offset, te, to)` takes its two
/// FMAs, A's elements broadcast from `ae` / `ao` at the row's offset. At the end each row's
/// `(te + to) + C` goes to `out` at its offset.
macro_rules! few_rows_asm {
    (
        $csr:expr, $b:expr, $ae:expr, $ao:expr, $k:expr, $c:expr, $out:expr;
        [$($convert:literal),+];
        $(($off:literal, $te:literal, $to:literal)),+
    ) => {
        asm!(
            "vstmxcsr dword ptr [{csr}]",
            "vldmxcsr dword ptr [{csr} + 4]",
            "vpbroadcastd zmm18, dword ptr [{csr} + 8]",
            $(
                concat!("vxorps xmm", $te, ", xmm", $te, ", xmm", $te),
                concat!("vxorps xmm", $to, ", xmm", $to, ", xmm", $to),
            )+
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "vmovdqu32 zmm16, zmmword ptr [{b}]",
            $($convert,)+
            $(
                concat!("vfmadd231ps zmm", $te, ", zmm17, dword ptr [{ae} + ", $off, "]{{1to16}}"),
                concat!("vfmadd231ps zmm", $to, ", zmm16, dword ptr [{ao} + ", $off, "]{{1to16}}"),
            )+
            "add {b}, 64",
            "add {ae}, 4",
            "add {ao}, 4",
            "dec {n}",
            "jnz 2b",
            "3:",
            $(
                concat!("vaddps zmm", $te, ", zmm", $te, ", zmm", $to),
                concat!("vaddps zmm", $te, ", zmm", $te, ", zmmword ptr [{c} + ", $off, "]"),
                concat!("vmovups zmmword ptr [{out} + ", $off, "], zmm", $te),
            )+
            "vldmxcsr dword ptr [{csr}]",
            csr = in(reg) $csr,
            b = inout(reg) $b => _,
            ae = inout(reg) $ae => _,
            ao = inout(reg) $ao => _,
            n = inout(reg) $k => _,
            c = in(reg) $c,
            out = in(reg) $out,
            out("zmm0") _,
            out("zmm1") _,
            out("zmm2") _,
            out("zmm3") _,
            out("zmm4") _,
            out("zmm5") _,
            out("zmm6") _,
            out("zmm7") _,
            out("zmm16") _,
            out("zmm17") _,
            out("zmm18") _,
            options(nostack),
        )
    };
}

/// [`few_rows_asm`] for `R` rows (1, 2 or 4) and the conversion of `half`.
macro_rules! few_rows_for {
    ($r:expr, $half:expr, $($operands:expr),+) => {
        match ($r, $half) {
            // The even bf16 of each dword shifted up, the odd one masked: exact.
            (1, Half::Bf16) => few_rows_asm!($($operands),+;
                ["vpslld zmm17, zmm16, 16", "vpandd zmm16, zmm16, zmm18"];
                ("0", "0", "1")),
            (2, Half::Bf16) => few_rows_asm!($($operands),+;
                ["vpslld zmm17, zmm16, 16", "vpandd zmm16, zmm16, zmm18"];
                ("0", "0", "1"), ("64", "2", "3")),
            (_, Half::Bf16) => few_rows_asm!($($operands),+;
                ["vpslld zmm17, zmm16, 16", "vpandd zmm16, zmm16, zmm18"];
                ("0", "0", "1"), ("64", "2", "3"), ("128", "4", "5"), ("192", "6", "7")),
            // Each dword's low half, then its high half, narrowed to 16 fp16 and converted.
            (1, Half::Fp16) => few_rows_asm!($($operands),+;
                [
                    "vpmovdw ymm17, zmm16",
                    "vcvtph2ps zmm17, ymm17",
                    "vpsrld zmm16, zmm16, 16",
                    "vpmovdw ymm16, zmm16",
                    "vcvtph2ps zmm16, ymm16"
                ];
                ("0", "0", "1")),
            (2, Half::Fp16) => few_rows_asm!($($operands),+;
                [
                    "vpmovdw ymm17, zmm16",
                    "vcvtph2ps zmm17, ymm17",
                    "vpsrld zmm16, zmm16, 16",
                    "vpmovdw ymm16, zmm16",
                    "vcvtph2ps zmm16, ymm16"
                ];
                ("0", "0", "1"), ("64", "2", "3")),
            (_, Half::Fp16) => few_rows_asm!($($operands),+;
                [
                    "vpmovdw ymm17, zmm16",
                    "vcvtph2ps zmm17, ymm17",
                    "vpsrld zmm16, zmm16, 16",
                    "vpmovdw ymm16, zmm16",
                    "vcvtph2ps zmm16, ymm16"
                ];
                ("0", "0", "1"), ("64", "2", "3"), ("128", "4", "5"), ("192", "6", "7")),
        }
    };
}

/// [`dot_half`] with `R` rows of A (1, 2 or 4; a GEMV's tiles, or a few tokens'): B's rows
/// converted in registers as the kernel reads them, each once, where [`half_rows`] converts
/// all 16 into memory first and computes a group of 8 rows. The same operations in the same
/// order as [`groups_kernel`] for those rows, so the same bits; rows from `m_rows` to `R` are
/// computed from whatever A holds there and dropped. fp16's VCVTPH2PS runs under the
/// kernel's MXCSR here, which DAZ does not affect ([`fp16_one_row_under_daz`] checks it at
/// start-up).
///
/// # Safety
/// The CPU must support AVX-512F; `R` is 1, 2 or 4 and `m_rows <= R`.
#[target_feature(enable = "avx512f")]
unsafe fn half_few_rows<const R: usize>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    half: Half,
) {
    let (m_rows, n_dwords, k_dwords) = super::clamp(m_rows.min(R), n_dwords, k_dwords);
    if m_rows == 0 || n_dwords == 0 {
        return;
    }
    // A's rows converted: the elements the kernel broadcasts, even then odd, 64 bytes a row.
    let mut ae = [[0f32; 16]; R];
    let mut ao = [[0f32; 16]; R];
    for (r, (e, o)) in ae.iter_mut().zip(ao.iter_mut()).enumerate() {
        let (even, odd) = split(load_row(a, r), half);
        // SAFETY: `e` and `o` are 64 writable bytes each; the stores are unaligned.
        unsafe {
            _mm512_storeu_si512(e.as_mut_ptr().cast(), even);
            _mm512_storeu_si512(o.as_mut_ptr().cast(), odd);
        }
    }
    let mut out = [[0u32; 16]; R];
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
    // `b`), dwords 0..k_dwords of the R rows of `ae` and `ao`, C's rows 0..R (R <= 4, inside
    // `c`) and the 3 dwords of `csr`, and writes the R rows of `out` and `csr`'s first dword,
    // all live locals or borrowed (the asm for R rows touches rows 0..R only: R is 1, 2 or 4,
    // the contract); it saves MXCSR and restores it before exiting, so no floating-point
    // operation of the compiler's runs under MXCSR_AMX. zmm0-zmm7 and zmm16-zmm18 are
    // declared clobbered, the pointers and counter are inout; no stack is used. The CPU
    // supports AVX-512F (this function's contract).
    unsafe { few_rows_for!(R, half, csr, bp, aep, aop, k_dwords, cp, outp) };
    let mask = lane_mask(n_dwords);
    for (m, dwords) in out.iter().enumerate().take(m_rows) {
        // SAFETY: `dwords` is 64 readable bytes; the load is unaligned.
        let mut row = unsafe { _mm512_loadu_si512(dwords.as_ptr().cast()) };
        let v = _mm512_castsi512_ps(row);
        let nan = _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(mask, v, v);
        if nan != 0 {
            row = fix_nan_lanes(row, c, a, b, m, nan, k_dwords, half);
        }
        store_row_masked(c, m, mask, row);
    }
}

/// Whether [`half_few_rows`]'s fp16 conversion, which runs under [`MXCSR_AMX`] (DAZ set),
/// keeps fp16 denormals: the fp16 denormal 2^-24 times 2^15 must give 2^-9. VCVTPH2PS ignores
/// DAZ on the CPUs documented to date; a CPU that flushed would get 0 and run other kernels.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cold]
#[target_feature(enable = "avx512f")]
unsafe fn fp16_one_row_under_daz() -> bool {
    let (mut a, mut b, mut c) = ([0u8; 1024], [0u8; 1024], [0u8; 1024]);
    set_dword(&mut a, 0, 0, 0x0001); // fp16 2^-24 (denormal), even element 0
    set_dword(&mut b, 0, 0, 0x7800); // fp16 2^15
    let want = exact::dot_element(0, &a, &b, 0, 0, 1, Half::Fp16);
    // SAFETY: the CPU supports AVX-512F (this function's contract).
    unsafe { half_few_rows::<1>(&mut c, &a, &b, (1, 1, 1), Half::Fp16) };
    get_dword(&c, 0, 0) == want && want != 0
}

/// [`dot_half`] with A's first `N` rows converted (`N` a multiple of [`GROUP`], at least
/// `m_rows`: the kernel reads A's rows of its groups only).
///
/// # Safety
/// The CPU must support AVX-512F; `N` is [`GROUP`] or 16, and `m_rows <= N`.
#[target_feature(enable = "avx512f")]
unsafe fn half_rows<const N: usize>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    half: Half,
) {
    // fp32 operands: A[m][k] even/odd (broadcast in the kernel), B[k] even/odd rows. All N
    // rows are converted whatever the shape: that is cheaper than branching. Built element by
    // element (`from_fn`), never zero-filled first: a zero fill of these five 1 KiB arrays was
    // 80 vector stores per instruction, as many as the conversion itself. (Each `split` half is
    // computed on its own; the other half is dead code the compiler drops.)
    let ae: [__m512i; N] = core::array::from_fn(|r| split(load_row(a, r), half).0);
    let ao: [__m512i; N] = core::array::from_fn(|r| split(load_row(a, r), half).1);
    let be: Panel = core::array::from_fn(|r| split(load_row(b, r), half).0);
    let bo: Panel = core::array::from_fn(|r| split(load_row(b, r), half).1);
    let operands = (
        ae.as_ptr().cast(),
        ao.as_ptr().cast(),
        be.as_ptr().cast(),
        bo.as_ptr().cast(),
    );
    // SAFETY: B's panels are 1024 bytes each and A's the N rows of 64 bytes the kernel reads
    // (`m_rows <= N`, the contract; it reads the rows of its groups of GROUP), all live for the
    // call; the CPU supports AVX-512F (this function's contract).
    unsafe { half_from_widened(c, (a, b), operands, (m_rows, n_dwords, k_dwords), half) }
}

/// Widens `tile` into `out` (see [`Widened`]): the form [`dot_half_widened`] reads, as A or
/// as B.
#[target_feature(enable = "avx512f")]
pub(super) fn widen(tile: &[u8; 1024], half: Half, out: &mut Widened) {
    for r in 0..ROWS {
        let (even, odd) = split(load_row(tile, r), half);
        // SAFETY: row r < 16 of each 1024-byte half of `out`; the stores are unaligned.
        unsafe {
            _mm512_storeu_si512(out.even.as_mut_ptr().add(r * 64).cast(), even);
            _mm512_storeu_si512(out.odd.as_mut_ptr().add(r * 64).cast(), odd);
        }
    }
}

/// [`dot_half`] with A and B already widened (`aw`, `bw`, from [`widen`] of `a` and `b`):
/// the arithmetic without the conversion, for operands the emulator keeps widened while their
/// tiles are unchanged. `a` and `b` are still read for the lanes that end in a NaN.
///
/// # Safety
/// The CPU must support AVX-512F.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dot_half_widened(
    c: &mut [u8; 1024],
    (a, aw): (&[u8; 1024], &Widened),
    (b, bw): (&[u8; 1024], &Widened),
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
    half: Half,
) {
    let operands = (
        aw.even.as_ptr(),
        aw.odd.as_ptr(),
        bw.even.as_ptr(),
        bw.odd.as_ptr(),
    );
    // SAFETY: the four halves are 1024 bytes each, borrowed for the call; the CPU supports
    // AVX-512F (this function's contract).
    unsafe { half_from_widened(c, (a, b), operands, (m_rows, n_dwords, k_dwords), half) }
}

/// Re-pairs `tile` into `out` for [`dot_bf16_paired`], as A or (`as_b`) as B: as A, row `r` of
/// `out.even` holds row `r` re-paired ([`pair_a_row`]: the even lane's 8 pair dwords, then
/// the odd lane's); as B, rows `p` < 8 of `out.even` and `out.odd` hold the even and odd lanes
/// of B's rows `2p`, `2p + 1` ([`pair_b_rows`]). The rest of `out` is left as it was.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn pair_tile(tile: &[u8; 1024], as_b: bool, out: &mut Widened) {
    let (even, odd) = (out.even.as_mut_ptr(), out.odd.as_mut_ptr());
    if as_b {
        for p in 0..ROWS / 2 {
            let (e, o) = pair_b_rows(tile, p);
            // SAFETY: row p < 8 of each 1024-byte half of `out`; the stores are unaligned.
            unsafe {
                _mm512_storeu_si512(even.add(p * 64).cast(), e);
                _mm512_storeu_si512(odd.add(p * 64).cast(), o);
            }
        }
    } else {
        for r in 0..ROWS {
            // SAFETY: row r < 16 of the 1024-byte `out.even`; the store is unaligned.
            unsafe { _mm512_storeu_si512(even.add(r * 64).cast(), pair_a_row(tile, r)) };
        }
    }
}

/// TDPBF16PS ([`dot_half`] on bf16) with A and B kept re-paired (`aw` from [`pair_tile`] of
/// `a` as A, `bw` of `b` as B), on VDPBF16PS: the same bits, half the multiply instructions.
/// `k_dwords` (after clamping) must be even, as a pair holds two k-steps; `a` and `b` are
/// still read for the lanes that end in a NaN.
///
/// # Safety
/// The CPU must support AVX-512F and AVX512_BF16 and pass [`pairs_available`]; `k_dwords`
/// clamped to 16 is even.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dot_bf16_paired(
    c: &mut [u8; 1024],
    (a, aw): (&[u8; 1024], &Widened),
    (b, bw): (&[u8; 1024], &Widened),
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
) {
    let operands = (
        aw.even.as_ptr(),
        // SAFETY: 32 bytes into the 1024 of `aw.even`: the odd lane's pairs of each row.
        unsafe { aw.even.as_ptr().add(32) },
        bw.even.as_ptr(),
        bw.odd.as_ptr(),
    );
    // SAFETY: the kernel reads at most 1024 bytes from each pointer, the odd lane's A 32
    // bytes short of the end of `aw.even` (its rows' dwords 0..8 only, as k / 2 <= 8); the
    // CPU supports what the paired kernel needs and `k_dwords` is even (this function's
    // contract).
    unsafe {
        kernel_and_nans::<true>(
            c,
            (a, b),
            operands,
            (m_rows, n_dwords, k_dwords),
            Half::Bf16,
        )
    }
}

/// The kernel and the NaN epilogue of [`dot_half`], on widened operands `(ae, ao, be, bo)`.
///
/// # Safety
/// The CPU must support AVX-512F; `be` and `bo` must point to 1024 readable bytes (16 rows of
/// 16 fp32), `ae` and `ao` to the rows of A the kernel's groups cover (`m_rows` clamped to 16
/// and rounded up to a multiple of [`GROUP`], 64 bytes each), all of which nothing writes
/// during the call.
#[target_feature(enable = "avx512f")]
unsafe fn half_from_widened(
    c: &mut [u8; 1024],
    ab: (&[u8; 1024], &[u8; 1024]),
    operands: (*const u8, *const u8, *const u8, *const u8),
    shape: (usize, usize, usize),
    half: Half,
) {
    // SAFETY: forwarded from this function's contract.
    unsafe { kernel_and_nans::<false>(c, ab, operands, shape, half) }
}

/// [`groups_kernel`] on `operands`, then the lanes that end in a NaN recomputed by the exact
/// model from `a`, `b` and C: the FMA kernel on widened operands, or (`PAIRS`) VDPBF16PS on
/// re-paired ones, `k_dwords / 2` pairs.
///
/// # Safety
/// The CPU must support AVX-512F; each pointer of `operands` must point to the bytes
/// [`groups_kernel`] reads of it (A's rows of its groups and B's 16 rows, 64 bytes each, or,
/// with `PAIRS`, as
/// [`dot_bf16_paired`] describes), which nothing writes during the call. With `PAIRS`, the
/// CPU passes [`pairs_available`] and `k_dwords` clamped to 16 is even.
#[target_feature(enable = "avx512f")]
unsafe fn kernel_and_nans<const PAIRS: bool>(
    c: &mut [u8; 1024],
    (a, b): (&[u8; 1024], &[u8; 1024]),
    (ae, ao, be, bo): (*const u8, *const u8, *const u8, *const u8),
    (m_rows, n_dwords, k_dwords): (usize, usize, usize),
    half: Half,
) {
    let (m_rows, n_dwords, k_dwords) = super::clamp(m_rows, n_dwords, k_dwords);
    if m_rows == 0 || n_dwords == 0 {
        return;
    }
    let row_end = m_rows.div_ceil(GROUP) * GROUP;
    let mut out = [MaybeUninit::<__m512i>::uninit(); ROWS];
    // SAFETY: the operands (the caller's contract), `c` and `out` hold 16 rows of 64 bytes and
    // row_end <= 16 is a multiple of GROUP, so the kernel reads ae/ao rows 0..row_end (dword
    // offsets < k_dwords <= 16), be/bo rows 0..k_dwords, c rows 0..row_end, and writes out
    // rows 0..row_end, all in bounds; nothing else accesses `c` and `out` during the call.
    // The CPU supports AVX-512F (this function's contract).
    unsafe {
        groups_kernel::<PAIRS>(
            ae,
            ao,
            be,
            bo,
            if PAIRS { k_dwords / 2 } else { k_dwords },
            c.as_ptr(),
            out.as_mut_ptr().cast(),
            row_end / GROUP,
        )
    };
    let mask = lane_mask(n_dwords);
    for (m, row) in out.iter().enumerate().take(m_rows) {
        // SAFETY: the kernel wrote rows 0..row_end of `out`, and m < m_rows <= row_end.
        let mut row = unsafe { row.assume_init() };
        let v = _mm512_castsi512_ps(row);
        let nan = _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(mask, v, v);
        if nan != 0 {
            row = fix_nan_lanes(row, c, a, b, m, nan, k_dwords, half);
        }
        store_row_masked(c, m, mask, row);
    }
}

/// Row `m` of the kernel's result with the lanes in `lanes` (those that ended in a NaN)
/// recomputed by the exact model.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
fn fix_nan_lanes(
    row: __m512i,
    c: &[u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m: usize,
    lanes: __mmask16,
    k_dwords: usize,
    half: Half,
) -> __m512i {
    let mut v = [0u32; DWORDS];
    // SAFETY: `v` is 16 writable dwords; the store is unaligned.
    unsafe { _mm512_storeu_si512(v.as_mut_ptr().cast(), row) };
    for (n, x) in v.iter_mut().enumerate() {
        if lanes & (1 << n) != 0 {
            *x = exact::dot_element(get_dword(c, m, n), a, b, m, n, k_dwords, half);
        }
    }
    // SAFETY: `v` is 16 readable dwords; the load is unaligned.
    unsafe { _mm512_loadu_si512(v.as_ptr().cast()) }
}

/// The asm of [`groups_kernel`] for one multiply instruction, `$op`: VFMADD231PS on widened
/// operands, VDPBF16PS on re-paired ones.
macro_rules! groups_pass {
    (
        $op:literal, $csr:expr, ($ae:expr, $ao:expr, $be:expr, $bo:expr), $k:expr, $c:expr,
        $out:expr, $groups:expr
    ) => {
        asm!(
            "vstmxcsr dword ptr [{csr}]",
            "vldmxcsr dword ptr [{csr} + 4]",
            "4:",
            "mov {bp}, {be}",
            "mov {op}, {bo}",
            "mov {n}, {k}",
            "vxorps xmm0, xmm0, xmm0",
            "vxorps xmm1, xmm1, xmm1",
            "vxorps xmm2, xmm2, xmm2",
            "vxorps xmm3, xmm3, xmm3",
            "vxorps xmm4, xmm4, xmm4",
            "vxorps xmm5, xmm5, xmm5",
            "vxorps xmm6, xmm6, xmm6",
            "vxorps xmm7, xmm7, xmm7",
            "vxorps xmm8, xmm8, xmm8",
            "vxorps xmm9, xmm9, xmm9",
            "vxorps xmm10, xmm10, xmm10",
            "vxorps xmm11, xmm11, xmm11",
            "vxorps xmm12, xmm12, xmm12",
            "vxorps xmm13, xmm13, xmm13",
            "vxorps xmm14, xmm14, xmm14",
            "vxorps xmm15, xmm15, xmm15",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "vmovups zmm16, zmmword ptr [{bp}]",
            "vmovups zmm17, zmmword ptr [{op}]",
            concat!($op, " zmm0, zmm16, dword ptr [{ae} + 0]{{1to16}}"),
            concat!($op, " zmm1, zmm17, dword ptr [{ao} + 0]{{1to16}}"),
            concat!($op, " zmm2, zmm16, dword ptr [{ae} + 64]{{1to16}}"),
            concat!($op, " zmm3, zmm17, dword ptr [{ao} + 64]{{1to16}}"),
            concat!($op, " zmm4, zmm16, dword ptr [{ae} + 128]{{1to16}}"),
            concat!($op, " zmm5, zmm17, dword ptr [{ao} + 128]{{1to16}}"),
            concat!($op, " zmm6, zmm16, dword ptr [{ae} + 192]{{1to16}}"),
            concat!($op, " zmm7, zmm17, dword ptr [{ao} + 192]{{1to16}}"),
            concat!($op, " zmm8, zmm16, dword ptr [{ae} + 256]{{1to16}}"),
            concat!($op, " zmm9, zmm17, dword ptr [{ao} + 256]{{1to16}}"),
            concat!($op, " zmm10, zmm16, dword ptr [{ae} + 320]{{1to16}}"),
            concat!($op, " zmm11, zmm17, dword ptr [{ao} + 320]{{1to16}}"),
            concat!($op, " zmm12, zmm16, dword ptr [{ae} + 384]{{1to16}}"),
            concat!($op, " zmm13, zmm17, dword ptr [{ao} + 384]{{1to16}}"),
            concat!($op, " zmm14, zmm16, dword ptr [{ae} + 448]{{1to16}}"),
            concat!($op, " zmm15, zmm17, dword ptr [{ao} + 448]{{1to16}}"),
            "add {bp}, 64",
            "add {op}, 64",
            "add {ae}, 4",
            "add {ao}, 4",
            "dec {n}",
            "jnz 2b",
            "3:",
            // te + to, then C + that: the operand order only matters for NaNs, which the
            // caller recomputes exactly.
            "vaddps zmm0, zmm0, zmm1",
            "vaddps zmm0, zmm0, zmmword ptr [{c} + 0]",
            "vmovups zmmword ptr [{out} + 0], zmm0",
            "vaddps zmm2, zmm2, zmm3",
            "vaddps zmm2, zmm2, zmmword ptr [{c} + 64]",
            "vmovups zmmword ptr [{out} + 64], zmm2",
            "vaddps zmm4, zmm4, zmm5",
            "vaddps zmm4, zmm4, zmmword ptr [{c} + 128]",
            "vmovups zmmword ptr [{out} + 128], zmm4",
            "vaddps zmm6, zmm6, zmm7",
            "vaddps zmm6, zmm6, zmmword ptr [{c} + 192]",
            "vmovups zmmword ptr [{out} + 192], zmm6",
            "vaddps zmm8, zmm8, zmm9",
            "vaddps zmm8, zmm8, zmmword ptr [{c} + 256]",
            "vmovups zmmword ptr [{out} + 256], zmm8",
            "vaddps zmm10, zmm10, zmm11",
            "vaddps zmm10, zmm10, zmmword ptr [{c} + 320]",
            "vmovups zmmword ptr [{out} + 320], zmm10",
            "vaddps zmm12, zmm12, zmm13",
            "vaddps zmm12, zmm12, zmmword ptr [{c} + 384]",
            "vmovups zmmword ptr [{out} + 384], zmm12",
            "vaddps zmm14, zmm14, zmm15",
            "vaddps zmm14, zmm14, zmmword ptr [{c} + 448]",
            "vmovups zmmword ptr [{out} + 448], zmm14",
            // The next group: A's rows 8 on (the k loop advanced ae/ao by 4 k bytes), C's and
            // out's rows 8 on.
            "sub {ae}, {k4}",
            "sub {ao}, {k4}",
            "add {ae}, 512",
            "add {ao}, 512",
            "add {c}, 512",
            "add {out}, 512",
            "dec {groups}",
            "jnz 4b",
            "vldmxcsr dword ptr [{csr}]",
            csr = in(reg) $csr,
            ae = inout(reg) $ae => _,
            ao = inout(reg) $ao => _,
            be = in(reg) $be,
            bo = in(reg) $bo,
            k = in(reg) $k,
            k4 = in(reg) 4 * $k,
            bp = out(reg) _,
            op = out(reg) _,
            n = out(reg) _,
            groups = inout(reg) $groups => _,
            c = inout(reg) $c => _,
            out = inout(reg) $out => _,
            out("zmm0") _,
            out("zmm1") _,
            out("zmm2") _,
            out("zmm3") _,
            out("zmm4") _,
            out("zmm5") _,
            out("zmm6") _,
            out("zmm7") _,
            out("zmm8") _,
            out("zmm9") _,
            out("zmm10") _,
            out("zmm11") _,
            out("zmm12") _,
            out("zmm13") _,
            out("zmm14") _,
            out("zmm15") _,
            out("zmm16") _,
            out("zmm17") _,
            options(nostack),

        )
    };
}

/// `groups` groups of eight rows of C: `out[r] = c[r] + (te[r] + to[r])` with
/// `te[r] = sum_k fma(ae[r][k], be[k])` and likewise for `to`, all under [`MXCSR_AMX`]. With
/// `PAIRS` the operands are bf16 re-paired ([`pair_tile`]) and `k` counts pairs of k-steps,
/// each one VDPBF16PS ([`super::pairs`]).
///
/// The whole computation, MXCSR switch and restore included, is one asm block: the compiler
/// never sees a floating-point operation while MXCSR differs from its default, and the caller's
/// MXCSR (control bits and sticky flags) is restored before the block ends. One switch per
/// instruction, not per group: VLDMXCSR costs about as much as a quarter of the arithmetic.
///
/// # Safety
/// The CPU must support AVX-512F, and AVX512_BF16 with `PAIRS`; `groups` >= 1. `ae`, `ao` must
/// point to `8 x groups` rows of 64 readable bytes (row stride 64, dword k of row r is the
/// broadcast A element), `be`, `bo` to `k` rows of 64 readable bytes, `c` to `8 x groups`
/// rows of 64 readable bytes, `out` to `8 x groups` rows of 64 writable bytes, with `out` not
/// overlapping the others.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn groups_kernel<const PAIRS: bool>(
    ae: *const u8,
    ao: *const u8,
    be: *const u8,
    bo: *const u8,
    k: usize,
    c: *const u8,
    out: *mut u8,
    groups: usize,
) {
    let mut csr = [0u32, MXCSR_AMX];
    let csr = csr.as_mut_ptr();
    // SAFETY: the memory operands are within the buffers the caller guarantees; `csr` points to
    // a live local the block saves MXCSR into and restores it from before exiting; zmm0-17 are
    // declared clobbered, the pointer and counter registers are inout or clobbered; no stack is
    // used. The instructions are ones the CPU supports (this function's contract).
    unsafe {
        if PAIRS {
            groups_pass!("vdpbf16ps", csr, (ae, ao, be, bo), k, c, out, groups);
        } else {
            groups_pass!("vfmadd231ps", csr, (ae, ao, be, bo), k, c, out, groups);
        }
    }
}
