//! The AMX-AVX512 row moves: one tile row into a 512-bit register, as it is (TILEMOVROW) or
//! converted (TCVTROWD2PS, TCVTROWPS2BF16H/L, TCVTROWPS2PHH/L)
//! ([semantics.md section 18](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md#18-amx-avx512-tilemovrow-and-the-tcvtrow-conversions)).
//!
//! Every conversion rounds to nearest even whatever MXCSR holds and raises nothing; they are
//! written on bit patterns here, so the host's floating-point environment plays no part.

/// What a row move writes into each dword of the register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RowOp {
    /// TILEMOVROW: the dword as it is.
    Move,
    /// TCVTROWD2PS: int32 to fp32.
    D2ps,
    /// TCVTROWPS2BF16H: fp32 to bf16 in the high half, the low half zero.
    Ps2bf16h,
    /// TCVTROWPS2BF16L: fp32 to bf16 in the low half, the high half zero.
    Ps2bf16l,
    /// TCVTROWPS2PHH: fp32 to fp16 in the high half, the low half zero.
    Ps2phh,
    /// TCVTROWPS2PHL: fp32 to fp16 in the low half, the high half zero.
    Ps2phl,
}

/// The 64 bytes the instruction writes into its zmm destination, for the row operand `row` as
/// the r32 form reads it (R2): row `row & 0xFFFF` of `tile` (shape `rows x colsb`), 64-byte
/// chunk `row >> 16` of it, dword by dword through `op`. Dwords at or past colsb / 4 are zero
/// (R4), and so is everything for a row not below `rows` (R3).
pub(crate) fn row(tile: &[u8; 1024], rows: u8, colsb: u16, row: u32, op: RowOp) -> [u8; 64] {
    let mut out = [0u8; 64];
    let (r, chunk) = ((row & 0xFFFF) as usize, (row >> 16) as usize);
    if r >= usize::from(rows) {
        return out;
    }
    // The chunk's first dword; dwords from colsb / 4 on read as zero.
    let (first, dwords) = (chunk * 16, (usize::from(colsb) / 4).min(16));
    for (i, dst) in out.chunks_exact_mut(4).enumerate() {
        let d = first + i;
        if d >= dwords {
            break;
        }
        let at = r * 64 + 4 * d;
        let x = u32::from_le_bytes([tile[at], tile[at + 1], tile[at + 2], tile[at + 3]]);
        let y = match op {
            RowOp::Move => x,
            RowOp::D2ps => i32_to_f32_bits(x as i32),
            RowOp::Ps2bf16h => u32::from(f32_to_bf16_bits(x)) << 16,
            RowOp::Ps2bf16l => u32::from(f32_to_bf16_bits(x)),
            RowOp::Ps2phh => u32::from(f32_to_fp16_bits(x)) << 16,
            RowOp::Ps2phl => u32::from(f32_to_fp16_bits(x)),
        };
        dst.copy_from_slice(&y.to_le_bytes());
    }
    out
}

/// The r32 row operand equivalent to the imm8 of an immediate form (R2): row `imm8 & 0x3F`,
/// chunk `imm8 >> 6`.
#[cfg(test)]
pub(crate) const fn imm8_row(imm8: u8) -> u32 {
    ((imm8 as u32) & 0x3F) | (((imm8 as u32) >> 6) << 16)
}

/// int32 to fp32, rounded to nearest even (exact up to 2^24 in magnitude).
pub(crate) fn i32_to_f32_bits(x: i32) -> u32 {
    if x == 0 {
        return 0;
    }
    let sign = (x as u32) & 0x8000_0000;
    let mag = x.unsigned_abs();
    let top = 31 - mag.leading_zeros(); // 0..=31
    let (sig, exp) = if top <= 23 {
        (mag << (23 - top), top)
    } else {
        let s = top - 23;
        let (q, rem, half) = (mag >> s, mag & ((1 << s) - 1), 1u32 << (s - 1));
        let q = q + u32::from(rem > half || (rem == half && q & 1 == 1));
        if q == 1 << 24 {
            (q >> 1, top + 1)
        } else {
            (q, top)
        }
    };
    sign | ((exp + 127) << 23) | (sig & 0x007F_FFFF)
}

/// fp32 to bf16 as Intel defines it for its bf16 conversions: zeros and denormals give a zero
/// of the same sign, infinities stay, a NaN keeps its sign and top payload and is made quiet,
/// anything else rounds to nearest even (overflowing to infinity).
pub(crate) fn f32_to_bf16_bits(x: u32) -> u16 {
    let (exp, frac) = ((x >> 23) & 0xFF, x & 0x007F_FFFF);
    if exp == 0 {
        return ((x >> 16) & 0x8000) as u16;
    }
    if exp == 0xFF {
        let top = (x >> 16) as u16;
        return if frac == 0 { top } else { top | 0x0040 };
    }
    let bias = 0x7FFF + ((x >> 16) & 1);
    (x.wrapping_add(bias) >> 16) as u16
}

/// fp32 to fp16, rounded to nearest even, with fp32 denormal inputs read as zero and results
/// below 2^-14 after rounding at an unbounded exponent flushed to a zero of their sign; a NaN
/// keeps its sign and the top of its payload and is made quiet; overflow gives infinity.
pub(crate) fn f32_to_fp16_bits(x: u32) -> u16 {
    let sign = ((x >> 16) & 0x8000) as u16;
    let (exp, frac) = ((x >> 23) & 0xFF, x & 0x007F_FFFF);
    if exp == 0xFF {
        return if frac == 0 {
            sign | 0x7C00
        } else {
            sign | 0x7E00 | (frac >> 13) as u16
        };
    }
    if exp == 0 {
        return sign;
    }
    // |x| = 1.frac * 2^(exp - 127); round to 11 significant bits at an unbounded exponent.
    let sig = frac | 0x0080_0000; // 24 bits
    let (rem, half) = (sig & 0x1FFF, 0x1000);
    let mut q = sig >> 13; // 11 bits
    q += u32::from(rem > half || (rem == half && q & 1 == 1));
    let mut e = exp as i32 - 127;
    if q == 1 << 11 {
        q >>= 1;
        e += 1;
    }
    if e < -14 {
        return sign;
    }
    if e > 15 {
        return sign | 0x7C00;
    }
    sign | (((e + 15) as u16) << 10) | (q as u16 & 0x03FF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_to_float_rounds_to_nearest_even() {
        for x in [
            0,
            1,
            -1,
            (1 << 24) - 1,
            1 << 24,
            (1 << 24) + 1,
            (1 << 24) + 3,
            i32::MAX,
            i32::MIN,
            -((1 << 25) + 2),
            123_456_789,
        ] {
            // `as` rounds to nearest even in Rust's (default) floating-point environment.
            assert_eq!(i32_to_f32_bits(x), (x as f32).to_bits(), "{x}");
        }
        let mut s = 0x9E37_79B9u32;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            assert_eq!(i32_to_f32_bits(s as i32), (s as i32 as f32).to_bits());
        }
    }

    #[test]
    fn float_to_bf16_is_intels_conversion() {
        assert_eq!(f32_to_bf16_bits(1f32.to_bits()), 0x3F80);
        assert_eq!(f32_to_bf16_bits(0x3F80_8000), 0x3F80); // tie to even (down)
        assert_eq!(f32_to_bf16_bits(0x3F81_8000), 0x3F82); // tie to even (up)
        assert_eq!(f32_to_bf16_bits(0x3F80_8001), 0x3F81);
        assert_eq!(f32_to_bf16_bits(0x8000_0001), 0x8000); // denormal: signed zero
        assert_eq!(f32_to_bf16_bits(0x7F7F_FFFF), 0x7F80); // overflow to infinity
        assert_eq!(f32_to_bf16_bits(0xFF80_0000), 0xFF80);
        assert_eq!(f32_to_bf16_bits(0x7F80_0001), 0x7FC0); // signalling NaN made quiet
        assert_eq!(f32_to_bf16_bits(0xFFA1_2345), 0xFFE1);
        // Against `half`'s round-to-nearest-even conversion on normal values.
        let mut s = 0x2545_F491u32;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let exp = (s >> 23) & 0xFF;
            if exp != 0 && exp != 0xFF {
                let want = half::bf16::from_f32(f32::from_bits(s)).to_bits();
                assert_eq!(f32_to_bf16_bits(s), want, "{s:#x}");
            }
        }
    }

    #[test]
    fn float_to_fp16_flushes_and_rounds_to_nearest_even() {
        assert_eq!(f32_to_fp16_bits(1f32.to_bits()), 0x3C00);
        assert_eq!(f32_to_fp16_bits(65504f32.to_bits()), 0x7BFF);
        assert_eq!(f32_to_fp16_bits(65520f32.to_bits()), 0x7C00); // the tie rounds up: infinity
        assert_eq!(f32_to_fp16_bits(65519f32.to_bits()), 0x7BFF);
        assert_eq!(f32_to_fp16_bits(2f32.powi(-14).to_bits()), 0x0400);
        // Below 2^-14 after rounding: flushed, not a denormal.
        assert_eq!(f32_to_fp16_bits((-(2f32.powi(-15))).to_bits()), 0x8000);
        // 2^-14 - 2^-26 rounds up to 2^-14 at 11 bits: kept.
        assert_eq!(
            f32_to_fp16_bits((2f32.powi(-14) - 2f32.powi(-26)).to_bits()),
            0x0400
        );
        assert_eq!(f32_to_fp16_bits(0x0000_0001), 0);
        assert_eq!(f32_to_fp16_bits(0x7F80_0001), 0x7E00);
        assert_eq!(f32_to_fp16_bits(0xFFC0_2000), 0xFE01);
        // Against `half` wherever the result is normal or infinite.
        let mut s = 0x1357_9BDFu32;
        for _ in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let (x, want) = (f32::from_bits(s), half::f16::from_f32(f32::from_bits(s)));
            // (Below 2^-14 the two differ by design: gradual underflow against the flush.)
            if x.abs() >= 2f32.powi(-14) && (want.is_normal() || want.is_infinite()) {
                assert_eq!(f32_to_fp16_bits(s), want.to_bits(), "{s:#x}");
            }
        }
    }

    #[test]
    fn a_row_past_the_shape_is_zero() {
        let tile: [u8; 1024] = core::array::from_fn(|i| i as u8 | 1);
        // Row 3 of a 4 x 16 tile: four dwords, then zeros.
        let r = row(&tile, 4, 16, 3, RowOp::Move);
        assert_eq!(&r[..16], &tile[3 * 64..3 * 64 + 16]);
        assert_eq!(r[16..], [0; 48]);
        // The low 16 bits select the row, the high 16 the 64-byte chunk: every chunk but 0
        // lies past a palette-1 row.
        assert_eq!(row(&tile, 4, 16, 0x13, RowOp::Move), [0; 64]);
        assert_eq!(row(&tile, 4, 16, 0x1_0003, RowOp::Move), [0; 64]);
        assert_eq!(row(&tile, 16, 64, 0x1_000F, RowOp::Move), [0; 64]);
        assert_eq!(row(&tile, 4, 16, 4, RowOp::Move), [0; 64]);
        assert_eq!(row(&tile, 16, 64, 15, RowOp::Move)[..], tile[15 * 64..]);
        // The immediate form: row imm8 & 0x3F, chunk imm8 >> 6.
        assert_eq!(imm8_row(0x43), 0x1_0003);
        assert_eq!(imm8_row(0x3F), 0x3F);
        assert_eq!(imm8_row(0xFF), 0x3_003F);
    }
}
