//! The two 8-bit floating-point formats of AMX-FP8, as values: [`Bf8`] (E5M2) and [`Hf8`]
//! (E4M3), under Intel's names.
//!
//! | | [`Bf8`] (E5M2) | [`Hf8`] (E4M3) |
//! |---|---|---|
//! | bits | sign, 5 exponent, 2 fraction | sign, 4 exponent, 3 fraction |
//! | exponent bias | 15 | 7 |
//! | largest finite | 57344 (`0x7B`) | 448 (`0x7E`) |
//! | smallest normal | 2^-14 | 2^-6 |
//! | smallest denormal | 2^-16 | 2^-9 |
//! | infinities | `0x7C`, `0xFC` | none |
//! | NaNs | exponent 31, fraction nonzero | `0x7F`, `0xFF` only |
//!
//! Both widen to `f32` exactly ([`Bf8::to_f32`], [`Hf8::to_f32`]): every value, denormals
//! included, is a normal `f32`. Narrowing rounds to nearest, ties to even, at the format's own
//! precision, denormals included; what happens past the largest finite value is the caller's
//! choice ([`Bf8::from_f32`], [`Bf8::from_f32_saturating`] and the same for [`Hf8`]).
//!
//! ```
//! use amx_runtime::fp8::{Bf8, Hf8};
//!
//! assert_eq!(Hf8::from_f32(1.0).to_bits(), 0x38);
//! assert_eq!(Hf8::from_f32(0.3).to_f32(), 0.3125); // 3 fraction bits
//! assert_eq!(Bf8::from_f32(0.3).to_f32(), 0.3125); // 2 fraction bits, the same here
//! assert!(Hf8::from_f32(1000.0).is_nan()); // E4M3 has no infinity
//! assert_eq!(Hf8::from_f32_saturating(1000.0).to_f32(), 448.0);
//! assert_eq!(Bf8::from_f32(1.0e6).to_f32(), f32::INFINITY);
//! ```

use std::fmt;

/// One of the two formats, as the conversions see it.
#[derive(Clone, Copy)]
struct Format {
    /// Fraction bits.
    frac_bits: u32,
    /// Exponent bias.
    bias: i32,
    /// Whether the all-ones exponent holds infinities and NaNs (E5M2) rather than finite values
    /// and one NaN per sign (E4M3).
    ieee: bool,
}

const E5M2: Format = Format {
    frac_bits: 2,
    bias: 15,
    ieee: true,
};

const E4M3: Format = Format {
    frac_bits: 3,
    bias: 7,
    ieee: false,
};

impl Format {
    const fn exp_max(self) -> u32 {
        (1 << (7 - self.frac_bits)) - 1
    }

    const fn frac_mask(self) -> u8 {
        (1 << self.frac_bits) - 1
    }

    const fn is_nan(self, bits: u8) -> bool {
        let exp = (bits & 0x7F) as u32 >> self.frac_bits;
        let frac = bits & self.frac_mask();
        if self.ieee {
            exp == self.exp_max() && frac != 0
        } else {
            exp == self.exp_max() && frac == self.frac_mask()
        }
    }

    /// The largest finite magnitude's bits.
    const fn max_finite(self) -> u8 {
        if self.ieee {
            ((self.exp_max() as u8 - 1) << self.frac_bits) | self.frac_mask()
        } else {
            ((self.exp_max() as u8) << self.frac_bits) | (self.frac_mask() - 1)
        }
    }

    /// The quiet NaN a conversion writes (sign kept).
    const fn nan(self) -> u8 {
        if self.ieee {
            ((self.exp_max() as u8) << self.frac_bits) | (1 << (self.frac_bits - 1))
        } else {
            0x7F
        }
    }

    /// The fp32 bit pattern of `bits`, exactly.
    const fn to_f32_bits(self, bits: u8) -> u32 {
        let sign = ((bits & 0x80) as u32) << 24;
        let exp = (bits & 0x7F) as u32 >> self.frac_bits;
        let frac = (bits & self.frac_mask()) as u32;
        let shift = 23 - self.frac_bits;
        if self.is_nan(bits) {
            // The fraction moves to the top of the fp32 fraction; quietness is that of the
            // fp32 pattern (the arithmetic quiets it).
            return sign | 0x7F80_0000 | (frac << shift);
        }
        if self.ieee && exp == self.exp_max() {
            return sign | 0x7F80_0000;
        }
        if exp == 0 {
            if frac == 0 {
                return sign;
            }
            // frac * 2^(1 - bias - frac_bits), top set bit at p: 1.x * 2^(p + 1 - bias - frac_bits).
            let p = 31 - frac.leading_zeros();
            let biased = p as i32 + 1 - self.bias - self.frac_bits as i32 + 127;
            return sign | ((biased as u32) << 23) | ((frac << (23 - p)) & 0x007F_FFFF);
        }
        let biased = exp as i32 - self.bias + 127;
        sign | ((biased as u32) << 23) | (frac << shift)
    }

    /// [`Format::to_f32_bits`] of every encoding, indexed by the encoding.
    const fn widening_table(self) -> [u32; 256] {
        let mut table = [0u32; 256];
        let mut bits = 0;
        while bits < 256 {
            table[bits] = self.to_f32_bits(bits as u8);
            bits += 1;
        }
        table
    }

    /// Rounds `x` to nearest even at this format's precision; `None` past the largest finite
    /// value (the caller chooses infinity, NaN or saturation), NaNs to the quiet NaN.
    fn narrow(self, x: f32) -> Result<u8, Overflow> {
        let bits = x.to_bits();
        let sign = ((bits >> 24) & 0x80) as u8;
        let mag = bits & 0x7FFF_FFFF;
        if mag > 0x7F80_0000 {
            return Ok(sign | self.nan());
        }
        if mag == 0x7F80_0000 {
            return Err(Overflow { sign });
        }
        if mag == 0 {
            return Ok(sign);
        }
        // mag = m * 2^e with m an integer.
        let (m, e) = if mag >> 23 == 0 {
            (u64::from(mag), -149)
        } else {
            (
                u64::from(mag & 0x007F_FFFF | 0x0080_0000),
                (mag >> 23) as i32 - 150,
            )
        };
        let top = e + 63 - m.leading_zeros() as i32; // floor(log2 |x|)
        let emin = 1 - self.bias;
        let quantum = top.max(emin) - self.frac_bits as i32; // the result's ulp, as a power of 2
        let shift = quantum - e;
        let q = if shift <= 0 {
            m << (-shift) as u32
        } else if shift >= 64 {
            0
        } else {
            let s = shift as u32;
            let (q, rem, half) = (m >> s, m & ((1 << s) - 1), 1u64 << (s - 1));
            q + u64::from(rem > half || (rem == half && q & 1 == 1))
        };
        // q * 2^quantum with q < 2^(frac_bits + 2): normal when q >= 2^frac_bits.
        let one = 1u64 << self.frac_bits;
        let (biased, frac) = if q < one {
            (0, q)
        } else if q < 2 * one {
            (
                (quantum + self.frac_bits as i32 + self.bias) as i64,
                q - one,
            )
        } else {
            ((quantum + self.frac_bits as i32 + 1 + self.bias) as i64, 0)
        };
        let code = (biased.clamp(0, 0x7F) as u8) << self.frac_bits | frac as u8;
        if biased > i64::from(self.exp_max()) || code > self.max_finite() {
            return Err(Overflow { sign });
        }
        Ok(sign | code)
    }
}

/// A magnitude past the format's largest finite value (infinity included), with its sign bit.
struct Overflow {
    sign: u8,
}

macro_rules! fp8_type {
    ($(#[$doc:meta])* $name:ident, $format:expr, $overflow:literal, $on_overflow:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        #[repr(transparent)]
        pub struct $name(u8);

        impl $name {
            /// The value whose encoding is `bits`.
            pub const fn from_bits(bits: u8) -> Self {
                $name(bits)
            }

            /// The encoding.
            pub const fn to_bits(self) -> u8 {
                self.0
            }

            /// The value as an `f32`, exactly (denormals included; NaNs stay NaNs with their
            /// sign).
            pub fn to_f32(self) -> f32 {
                f32::from_bits($format.to_f32_bits(self.0))
            }

            /// Whether this is a NaN.
            pub fn is_nan(self) -> bool {
                $format.is_nan(self.0)
            }

            /// `x` rounded to nearest, ties to even (denormals at their own precision); NaN
            /// gives a quiet NaN of the same sign, and a magnitude past the largest finite
            #[doc = concat!("value gives ", $overflow, ".")]
            pub fn from_f32(x: f32) -> Self {
                $name($format.narrow(x).unwrap_or_else($on_overflow))
            }

            /// `x` rounded as by
            #[doc = concat!("[`", stringify!($name), "::from_f32`],")]
            /// with magnitudes past the largest finite value (infinities included) clamped to
            /// it, sign kept.
            pub fn from_f32_saturating(x: f32) -> Self {
                $name(
                    $format
                        .narrow(x)
                        .unwrap_or_else(|o| o.sign | $format.max_finite()),
                )
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:#04x} = {})", stringify!($name), self.0, self.to_f32())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.to_f32(), f)
            }
        }

        impl From<$name> for f32 {
            fn from(x: $name) -> f32 {
                x.to_f32()
            }
        }
    };
}

fp8_type!(
    /// BF8: Intel's name for E5M2, an 8-bit float with 1 sign, 5 exponent and 2 fraction bits,
    /// infinities and NaNs (the top byte of an IEEE binary16). An AMX-FP8 operand.
    Bf8,
    E5M2,
    "an infinity of the same sign",
    |o: Overflow| o.sign | 0x7C
);

fp8_type!(
    /// HF8: Intel's name for E4M3, an 8-bit float with 1 sign, 4 exponent and 3 fraction bits,
    /// no infinities and a single NaN per sign (`S.1111.111`), largest finite 448. An AMX-FP8
    /// operand.
    Hf8,
    E4M3,
    "the NaN of that sign (E4M3 has no infinity)",
    |o: Overflow| o.sign | 0x7F
);

/// The fp32 bit pattern of a BF8 value (for the emulator's arithmetic).
#[inline]
pub(crate) fn bf8_to_f32_bits(bits: u8) -> u32 {
    BF8_WIDENED[usize::from(bits)]
}

/// The fp32 bit pattern of an HF8 value (for the emulator's arithmetic).
#[inline]
pub(crate) fn hf8_to_f32_bits(bits: u8) -> u32 {
    HF8_WIDENED[usize::from(bits)]
}

// Every encoding widened at compile time: an FP8 dot product widens 2 048 values, and a lookup
// is several times cheaper than the bit manipulation (the tests check every entry against the
// formats' definitions).
const BF8_WIDENED: [u32; 256] = E5M2.widening_table();
const HF8_WIDENED: [u32; 256] = E4M3.widening_table();

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of an encoding, from the format's definition in f64 (independent of the
    /// bit-level conversion above).
    fn value(bits: u8, exp_bits: u32, frac_bits: u32, bias: i32) -> f64 {
        let sign = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let exp = i32::from(bits & 0x7F) >> frac_bits;
        let frac = f64::from(bits & ((1 << frac_bits) - 1));
        let scale = f64::from(1u32 << frac_bits);
        let _ = exp_bits;
        if exp == 0 {
            sign * frac / scale * 2f64.powi(1 - bias)
        } else {
            sign * (1.0 + frac / scale) * 2f64.powi(exp - bias)
        }
    }

    #[test]
    fn every_encoding_widens_exactly() {
        for bits in 0..=255u8 {
            let h = Hf8::from_bits(bits);
            if bits & 0x7F == 0x7F {
                assert!(h.is_nan() && h.to_f32().is_nan(), "{bits:#x}");
            } else {
                assert!(!h.is_nan());
                assert_eq!(f64::from(h.to_f32()), value(bits, 4, 3, 7), "hf8 {bits:#x}");
            }
            let b = Bf8::from_bits(bits);
            match (bits & 0x7C, bits & 0x03) {
                (0x7C, 0) => assert_eq!(b.to_f32().abs(), f32::INFINITY),
                (0x7C, _) => assert!(b.is_nan() && b.to_f32().is_nan()),
                _ => assert_eq!(
                    f64::from(b.to_f32()),
                    value(bits, 5, 2, 15),
                    "bf8 {bits:#x}"
                ),
            }
            // NaNs keep their sign; BF8 is the top byte of an fp16.
            assert_eq!(b.to_f32().is_sign_negative(), bits & 0x80 != 0);
            let fp16 = half::f16::from_bits(u16::from(bits) << 8).to_f32();
            assert!(fp16.to_bits() == b.to_f32().to_bits() || fp16.is_nan() && b.is_nan());
        }
    }

    #[test]
    fn every_finite_encoding_narrows_back_to_itself() {
        for bits in 0..=255u8 {
            let h = Hf8::from_bits(bits);
            if !h.is_nan() {
                assert_eq!(Hf8::from_f32(h.to_f32()), h, "{bits:#x}");
            }
            let b = Bf8::from_bits(bits);
            if !b.is_nan() {
                assert_eq!(Bf8::from_f32(b.to_f32()), b, "{bits:#x}");
            }
        }
    }

    /// Every midpoint between two neighbours rounds to the even one, and a hair off it to the
    /// nearer one: the rounding against the formats' definitions, denormals included.
    #[test]
    fn narrowing_rounds_to_nearest_even() {
        type Narrow = fn(f32) -> f32;
        type Widen = fn(u8) -> f32;
        let formats: [(&str, Widen, Narrow); 2] = [
            (
                "hf8",
                |b| Hf8::from_bits(b).to_f32(),
                |x| Hf8::from_f32(x).to_f32(),
            ),
            (
                "bf8",
                |b| Bf8::from_bits(b).to_f32(),
                |x| Bf8::from_f32(x).to_f32(),
            ),
        ];
        for (name, widen, narrow) in formats {
            for bits in 0..0x7Eu8 {
                let (lo, hi) = (widen(bits), widen(bits + 1));
                if !hi.is_finite() {
                    continue;
                }
                // Every midpoint of these formats is exact in f32.
                let mid = ((f64::from(lo) + f64::from(hi)) / 2.0) as f32;
                let even = if bits % 2 == 0 { lo } else { hi };
                assert_eq!(narrow(mid), even, "{name}: {mid:e}");
                assert_eq!(narrow(-mid), -even, "{name}: {:e}", -mid);
                assert_eq!(narrow(mid.next_down()), lo, "{name}: below {mid:e}");
                assert_eq!(narrow(mid.next_up()), hi, "{name}: above {mid:e}");
            }
        }
    }

    #[test]
    fn overflow_and_specials() {
        assert_eq!(Hf8::from_f32(448.0).to_bits(), 0x7E);
        assert_eq!(Hf8::from_f32(463.0).to_bits(), 0x7E); // below the midpoint to 480
        assert_eq!(Hf8::from_f32(464.0).to_bits(), 0x7E); // the midpoint: to even, 448
        assert_eq!(Hf8::from_f32(464.5).to_bits(), 0x7F); // rounds to 480: past the range
        assert_eq!(Hf8::from_f32_saturating(-1.0e9).to_bits(), 0xFE);
        assert_eq!(Hf8::from_f32(f32::INFINITY).to_bits(), 0x7F);
        assert_eq!(Hf8::from_f32(f32::NAN).to_bits() & 0x7F, 0x7F);
        assert_eq!(Bf8::from_f32(57344.0).to_bits(), 0x7B);
        assert_eq!(Bf8::from_f32(61439.0).to_bits(), 0x7B);
        assert_eq!(Bf8::from_f32(61440.0).to_bits(), 0x7C); // the tie goes to "65536": inf
        assert_eq!(Bf8::from_f32(f32::NEG_INFINITY).to_bits(), 0xFC);
        assert_eq!(Bf8::from_f32_saturating(f32::NEG_INFINITY).to_bits(), 0xFB);
        assert!(Bf8::from_f32(f32::NAN).is_nan());
        assert_eq!(Bf8::from_f32(-0.0).to_bits(), 0x80);
        assert_eq!(Hf8::from_f32(2f32.powi(-10)).to_bits(), 0x00); // half the smallest: even
        assert_eq!(Hf8::from_f32(2f32.powi(-10) * 1.01).to_bits(), 0x01);
        assert_eq!(Bf8::from_f32(f32::from_bits(1)).to_bits(), 0x00);
    }
}
