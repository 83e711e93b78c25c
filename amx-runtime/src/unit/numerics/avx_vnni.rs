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
    __m256i, _mm256_dpbusd_avx_epi32, _mm256_loadu_si256, _mm256_set1_epi32, _mm256_setzero_si256,
    _mm256_sub_epi32, _mm256_xor_si256,
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

/// One k step of one row of C (two halves): `acc[h] += VPDPBUSD(av, b[h])`, A's broadcast
/// dword `av` the unsigned operand when `A_IS_U8`, else B's row.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
fn dp_row<const A_IS_U8: bool>(acc: &mut [__m256i; 2], av: __m256i, b: [__m256i; 2]) {
    for (acc, b) in acc.iter_mut().zip(b) {
        *acc = if A_IS_U8 {
            _mm256_dpbusd_avx_epi32(*acc, av, b)
        } else {
            _mm256_dpbusd_avx_epi32(*acc, b, av)
        };
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
            dp_row::<A_IS_U8>(pair, av, [b0, b1]);
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

/// A 2x2 block of integer products over `steps` k-steps (see `super::block`): for each step
/// `s`, with A0/A1 the tiles at `a + s * a_step` and `+ 1024` and B0/B1 those at
/// `b + s * b_step` and `+ 1024`, `C[2h + w] += Ah x Bw` on full tiles.
///
/// The arithmetic of [`dot_int8`] with the per-instruction costs taken out of the step loop,
/// as `super::avx512::dot_2x2_int8` does: A biased once per step for both products that read
/// it, the accumulators of a group of rows kept in registers over a chunk of 4 steps, and the
/// correction (which depends on the column only) summed over every step and subtracted once.
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI; for every `s < steps`, the 2048 bytes at
/// `a + s * a_step` and at `b + s * b_step` must be readable.
#[target_feature(enable = "avx2,avxvnni")]
pub(super) unsafe fn dot_2x2_int8(
    c: &mut [[u8; 1024]; 4],
    a: (*const u8, usize),
    b: (*const u8, usize),
    steps: usize,
    (a_signed, b_signed): (bool, bool),
) {
    // SAFETY: forwarded from this function's contract (all four calls).
    unsafe {
        match (a_signed == b_signed, b_signed) {
            (true, true) => block::<true, true>(c, a, b, steps),
            (true, false) => block::<true, false>(c, a, b, steps),
            (false, true) => block::<false, true>(c, a, b, steps),
            (false, false) => block::<false, false>(c, a, b, steps),
        }
    }
}

/// Steps per visit of a group of rows: its accumulators are loaded and stored once per chunk.
const CHUNK: usize = 4;

/// [`dot_2x2_int8`] for one signedness: `BIASED` when A is biased by 0x80 (same signedness),
/// `A_IS_U8` when A's (biased) bytes are VPDPBUSD's unsigned operand (B signed).
///
/// # Safety
/// As [`dot_2x2_int8`].
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn block<const BIASED: bool, const A_IS_U8: bool>(
    c: &mut [[u8; 1024]; 4],
    (a, a_step): (*const u8, usize),
    (b, b_step): (*const u8, usize),
    steps: usize,
) {
    let splat = _mm256_set1_epi32(0x8080_8080_u32 as i32);
    // A chunk's A (both tiles of each step, 32 rows of 64 bytes), biased when BIASED.
    let mut biased = [[_mm256_setzero_si256(); 4 * ROWS]; CHUNK];
    // The correction of each column tile's two halves.
    let mut corr = [[_mm256_setzero_si256(); 2]; 2];
    for s0 in (0..steps).step_by(CHUNK) {
        let chunk = CHUNK.min(steps - s0);
        if BIASED {
            for (j, rows) in biased.iter_mut().enumerate().take(chunk) {
                for (i, v) in rows.iter_mut().enumerate() {
                    // SAFETY: s0 + j < steps and i * 32 + 32 <= 2048: inside the step's A
                    // (the contract).
                    let x = unsafe { _mm256_loadu_si256(a.add((s0 + j) * a_step + i * 32).cast()) };
                    *v = _mm256_xor_si256(x, splat);
                }
                for (w, halves) in corr.iter_mut().enumerate() {
                    for k in 0..ROWS {
                        for (h, acc) in halves.iter_mut().enumerate() {
                            let at = (s0 + j) * b_step + w * 1024 + k * 64 + h * 32;
                            // SAFETY: inside the step's B (the contract).
                            let bk = unsafe { _mm256_loadu_si256(b.add(at).cast()) };
                            *acc = if A_IS_U8 {
                                _mm256_dpbusd_avx_epi32(*acc, splat, bk)
                            } else {
                                _mm256_dpbusd_avx_epi32(*acc, bk, splat)
                            };
                        }
                    }
                }
            }
        }
        // Only the chunk's steps are located: past them `(s0 + j) * step` may overflow (the
        // operands were validated for steps below `steps` only); those slots stay unused.
        let step_at = |base: *const u8, step: usize, j: usize| {
            if j < chunk {
                base.wrapping_add((s0 + j) * step)
            } else {
                base
            }
        };
        let steps_a: [*const u8; CHUNK] = core::array::from_fn(|j| {
            if BIASED {
                biased[j].as_ptr().cast()
            } else {
                step_at(a, a_step, j)
            }
        });
        let steps_b: [*const u8; CHUNK] = core::array::from_fn(|j| step_at(b, b_step, j));
        for (t, tile) in c.iter_mut().enumerate() {
            let (h, w) = (t / 2, t % 2);
            let chunk_ops = ChunkOps {
                a: &steps_a[..chunk],
                a_at: h * 1024,
                b: &steps_b[..chunk],
                b_at: w * 1024,
            };
            // SAFETY: the pointers of the chunk's steps (j < chunk, so s0 + j < steps) lie at
            // the start of 2048 readable bytes: the caller's A and B (the contract) or the
            // live `biased` buffer, which is not written during the call.
            unsafe {
                block_rows::<A_IS_U8, 6>(tile, 0, chunk_ops);
                block_rows::<A_IS_U8, 6>(tile, 6, chunk_ops);
                block_rows::<A_IS_U8, 4>(tile, 12, chunk_ops);
            }
        }
    }
    if BIASED && steps > 0 {
        for (t, tile) in c.iter_mut().enumerate() {
            for r in 0..ROWS {
                let row = [
                    _mm256_sub_epi32(load_half_row(tile, r, 0), corr[t % 2][0]),
                    _mm256_sub_epi32(load_half_row(tile, r, 1), corr[t % 2][1]),
                ];
                store_row(tile, r, 16, row);
            }
        }
    }
}

/// The operands of one chunk for one C tile: per step, a pointer to 2048 bytes of (biased)
/// A and of B, and the offset of the tile that product reads in each.
#[derive(Clone, Copy)]
struct ChunkOps<'p> {
    a: &'p [*const u8],
    a_at: usize,
    b: &'p [*const u8],
    b_at: usize,
}

/// Rows `m0..m0 + G` (all inside the tile) of one C tile over the steps of a chunk.
///
/// # Safety
/// The CPU must support AVX2 and AVX-VNNI; every pointer of `ops` is the start of 2048
/// readable bytes, and `ops.a_at`, `ops.b_at` are 0 or 1024; `m0 + G <= 16`.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn block_rows<const A_IS_U8: bool, const G: usize>(
    c: &mut [u8; 1024],
    m0: usize,
    ops: ChunkOps<'_>,
) {
    let mut acc = [[_mm256_setzero_si256(); 2]; G];
    for (j, pair) in acc.iter_mut().enumerate() {
        pair[0] = load_half_row(c, m0 + j, 0);
        pair[1] = load_half_row(c, m0 + j, 1);
    }
    for (&a, &b) in ops.a.iter().zip(ops.b) {
        for k in 0..ROWS {
            // SAFETY: row k < 16 of the tile at b_at <= 1024: inside the step's 2048 bytes.
            let (b0, b1) = unsafe {
                let row = b.add(ops.b_at + k * 64);
                (
                    _mm256_loadu_si256(row.cast()),
                    _mm256_loadu_si256(row.add(32).cast()),
                )
            };
            for (r, pair) in acc.iter_mut().enumerate() {
                // SAFETY: dword k < 16 of row m0 + r < 16 of the tile at a_at <= 1024: inside
                // the step's 2048 bytes.
                let av = _mm256_set1_epi32(unsafe {
                    a.add(ops.a_at + (m0 + r) * 64 + k * 4)
                        .cast::<i32>()
                        .read_unaligned()
                });
                dp_row::<A_IS_U8>(pair, av, [b0, b1]);
            }
        }
    }
    for (j, pair) in acc.iter().enumerate() {
        store_row(c, m0 + j, 16, *pair);
    }
}
