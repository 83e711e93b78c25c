//! AVX-VNNI kernels (x86-64 only) for the integer products, selected at run time on CPUs that
//! have AVX-VNNI but not AVX-512 VNNI (Intel client cores since Alder Lake, among others).
//!
//! The arithmetic of the AVX-512 kernel on 256-bit vectors: VPDPBUSD (VEX-encoded; u8 x s8,
//! four products per dword, wrapping 32-bit accumulate), with A biased by 0x80 when both
//! operands have the same signedness and the bias removed by one correction vector per half
//! row (see `super::avx512::dot_int8` for the algebra). One VPDPBUSD does 32 multiply-adds,
//! twice the VPMADDWD + VPADDD pair of the AVX2 kernel, and needs no widening of the operands.
//!
//! Register blocking: a C row is two vectors; six rows at a time are 12 accumulators (VPDPBUSD
//! chains: 2 ports x 5 cycles of latency need about 10), with B's two half rows and one A
//! broadcast: 15 of the 16 vector registers.

use core::arch::x86_64::{
    __m256i, _mm256_dpbusd_avx_epi32, _mm256_set1_epi32, _mm256_setzero_si256, _mm256_sub_epi32,
};

use super::avx2::{load_half_row, store_row};
use super::ROWS;

/// Whether [`dot_int8`] may run on this CPU.
#[inline]
pub(super) fn int8_available() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("avxvnni")
}

/// `TDPB[SU][SU]D` as `super::dot_int8` describes it, with VPDPBUSD on 256-bit vectors.
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI.
#[allow(clippy::too_many_arguments)] // the shape of the instruction, as the dispatcher calls it
#[target_feature(enable = "avx2,avxvnni")]
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
    let biased = a_signed == b_signed;
    let splat = _mm256_set1_epi32(0x8080_8080_u32 as i32);
    // A with the bias applied, when there is one, so the hot loop only broadcasts dwords.
    let a_biased: [u8; 1024];
    let a = if biased {
        a_biased = core::array::from_fn(|i| a[i] ^ 0x80);
        &a_biased
    } else {
        a
    };
    // The correction of each half row: K extra VPDPBUSD per half (none when unbiased).
    let mut corr = [_mm256_setzero_si256(); 2];
    if biased {
        for k in 0..k_dwords {
            for (h, acc) in corr.iter_mut().enumerate() {
                let bk = load_half_row(b, k, h);
                *acc = if b_signed {
                    _mm256_dpbusd_avx_epi32(*acc, splat, bk)
                } else {
                    _mm256_dpbusd_avx_epi32(*acc, bk, splat)
                };
            }
        }
    }
    let shape = Shape {
        m_rows,
        n_dwords,
        k_dwords,
    };
    // Groups of 6 rows, and of 4 for a tail of at most 4 (a full tile is 6 + 6 + 4). A is the
    // unsigned operand exactly when B is signed (biased or not).
    let mut m0 = 0;
    while m0 < m_rows {
        let group = if m_rows - m0 > 4 { 6 } else { 4 };
        match (b_signed, group) {
            (true, 6) => rows::<true, 6>(c, a, b, m0, shape, corr),
            (true, _) => rows::<true, 4>(c, a, b, m0, shape, corr),
            (false, 6) => rows::<false, 6>(c, a, b, m0, shape, corr),
            (false, _) => rows::<false, 4>(c, a, b, m0, shape, corr),
        }
        m0 += group;
    }
}

/// The (clamped, nonempty) shape of a product.
#[derive(Clone, Copy)]
struct Shape {
    m_rows: usize,
    n_dwords: usize,
    k_dwords: usize,
}

/// Rows `m0..m0 + G` of C (those below `m_rows` written): `C[m] += sum_k VPDPBUSD(A[m][k],
/// B[k]) - corr`, A's bytes the unsigned operand when `A_IS_U8`. Rows past the tile wrap
/// around and are computed, then dropped.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn rows<const A_IS_U8: bool, const G: usize>(
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
    m0: usize,
    shape: Shape,
    corr: [__m256i; 2],
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; G];
    for (j, pair) in acc.iter_mut().enumerate() {
        pair[0] = load_half_row(c, (m0 + j) % ROWS, 0);
        pair[1] = load_half_row(c, (m0 + j) % ROWS, 1);
    }
    for k in 0..shape.k_dwords {
        let (b0, b1) = (load_half_row(b, k, 0), load_half_row(b, k, 1));
        for (j, pair) in acc.iter_mut().enumerate() {
            // SAFETY: row (m0 + j) % 16 < 16 and k < k_dwords <= 16 (clamped), so the dword's
            // 4 bytes lie inside A's 1024.
            let av = _mm256_set1_epi32(unsafe {
                a.as_ptr()
                    .add(((m0 + j) % ROWS) * 64 + k * 4)
                    .cast::<i32>()
                    .read_unaligned()
            });
            if A_IS_U8 {
                pair[0] = _mm256_dpbusd_avx_epi32(pair[0], av, b0);
                pair[1] = _mm256_dpbusd_avx_epi32(pair[1], av, b1);
            } else {
                pair[0] = _mm256_dpbusd_avx_epi32(pair[0], b0, av);
                pair[1] = _mm256_dpbusd_avx_epi32(pair[1], b1, av);
            }
        }
    }
    for (j, pair) in acc.iter().enumerate().take(shape.m_rows.saturating_sub(m0)) {
        let row = [
            _mm256_sub_epi32(pair[0], corr[0]),
            _mm256_sub_epi32(pair[1], corr[1]),
        ];
        store_row(c, m0 + j, shape.n_dwords, row);
    }
}
