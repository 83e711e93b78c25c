//! Placeholder: replaced by the bit-exact numerics module.
#![allow(dead_code, clippy::too_many_arguments)]

#[allow(clippy::too_many_arguments)]
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
    let ext = |x: u8, s: bool| if s { x as i8 as i32 } else { x as i32 };
    for m in 0..m_rows {
        for n in 0..n_dwords {
            let o = m * 64 + 4 * n;
            let mut acc = i32::from_le_bytes(c[o..o + 4].try_into().unwrap());
            for k in 0..k_dwords {
                for i in 0..4 {
                    acc = acc.wrapping_add(
                        ext(a[m * 64 + 4 * k + i], a_signed)
                            .wrapping_mul(ext(b[k * 64 + 4 * n + i], b_signed)),
                    );
                }
            }
            c[o..o + 4].copy_from_slice(&acc.to_le_bytes());
        }
    }
}
pub(crate) fn dot_bf16(
    _c: &mut [u8; 1024],
    _a: &[u8; 1024],
    _b: &[u8; 1024],
    _m: usize,
    _n: usize,
    _k: usize,
) {
}
pub(crate) fn dot_fp16(
    _c: &mut [u8; 1024],
    _a: &[u8; 1024],
    _b: &[u8; 1024],
    _m: usize,
    _n: usize,
    _k: usize,
) {
}
