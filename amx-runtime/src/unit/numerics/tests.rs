//! Tests of the numerics: the directed hardware cases of
//! [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
//! sections 9 to 11, and
//! differential tests of every fast path against the exact model.
//!
//! The formula of section 10 agreed with the silicon on 8,001,536 TDPBF16PS elements and
//! 1,601,536 TDPFP16PS elements (every bit, NaN payloads included) and the integer formula on
//! 3,800,151 outputs
//! ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)),
//! so the exact model here is tested against the directed
//! hardware results, and every fast path is tested against the exact model.

use super::*;

// ---------------------------------------------------------------------------------------------
// Helpers

/// splitmix64: small, seedable, good enough to spread test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn u32(&mut self) -> u32 {
        (self.next() >> 32) as u32
    }

    /// Uniform in `0..n` (n > 0; the tiny modulo bias is irrelevant here).
    fn below(&mut self, n: u32) -> u32 {
        self.u32() % n
    }

    fn sign32(&mut self) -> u32 {
        self.u32() & SIGN
    }
}

type Tile = [u8; 1024];

fn tile_of(mut f: impl FnMut(usize, usize) -> u32) -> Tile {
    let mut t = [0u8; 1024];
    for r in 0..16 {
        for d in 0..16 {
            set_dword(&mut t, r, d, f(r, d));
        }
    }
    t
}

/// A dword holding two 16-bit elements, `even` in the low half.
fn pair(even: u16, odd: u16) -> u32 {
    u32::from(even) | (u32::from(odd) << 16)
}

/// The reference tile product: the exact model on every element m < M, n < N.
fn oracle_half(c: &Tile, a: &Tile, b: &Tile, m: usize, n: usize, k: usize, half: Half) -> Tile {
    let mut out = *c;
    for mi in 0..m {
        for ni in 0..n {
            let v = exact::dot_element(get_dword(c, mi, ni), a, b, mi, ni, k, half);
            set_dword(&mut out, mi, ni, v);
        }
    }
    out
}

/// Asserts two result tiles are identical, naming the first differing element.
fn assert_same(what: &str, got: &Tile, want: &Tile, ctx: &dyn Fn(usize, usize) -> String) {
    for r in 0..16 {
        for d in 0..16 {
            let (g, w) = (get_dword(got, r, d), get_dword(want, r, d));
            assert!(
                g == w,
                "{what}: C[{r}][{d}] = {g:08X}, oracle {w:08X}; {}",
                ctx(r, d)
            );
        }
    }
}

/// A kernel a test can force, whatever the dispatch would choose on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// Plain Rust for the baseline target.
    Portable,
    /// The scalar floating-point path compiled with FMA (floating-point products only).
    ScalarFma,
    /// The AVX2 kernels.
    Avx2,
    /// The AVX-512 kernels.
    Avx512,
    /// The AVX-VNNI kernel (integer products only).
    AvxVnni,
}

impl Kernel {
    const INT8: [Kernel; 4] = [
        Kernel::Portable,
        Kernel::Avx2,
        Kernel::AvxVnni,
        Kernel::Avx512,
    ];
    const FLOAT: [Kernel; 4] = [
        Kernel::Portable,
        Kernel::ScalarFma,
        Kernel::Avx2,
        Kernel::Avx512,
    ];

    fn name(self) -> &'static str {
        match self {
            Kernel::Portable => "portable kernel",
            Kernel::ScalarFma => "scalar FMA kernel",
            Kernel::Avx2 => "AVX2 kernel",
            Kernel::Avx512 => "AVX-512 kernel",
            Kernel::AvxVnni => "AVX-VNNI kernel",
        }
    }

    /// Why this CPU cannot run the kernel's integer products, or `None` when it can.
    fn int8_missing(self) -> Option<&'static str> {
        match self {
            Kernel::Portable => None,
            Kernel::ScalarFma => Some("no such integer kernel"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => (!avx2::int8_available()).then_some("the CPU lacks AVX2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::AvxVnni => {
                (!avx_vnni::int8_available()).then_some("the CPU lacks AVX2 or AVX-VNNI")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => (!avx512::int8_available())
                .then_some("the CPU lacks AVX-512F, AVX-512BW or AVX-512 VNNI"),
            #[cfg(not(target_arch = "x86_64"))]
            _ => Some("not an x86-64 target"),
        }
    }

    /// Why this CPU cannot run the kernel's floating-point products, or `None` when it can.
    fn float_missing(self) -> Option<&'static str> {
        match self {
            Kernel::Portable => None,
            Kernel::AvxVnni => Some("no such floating-point kernel"),
            #[cfg(target_arch = "x86_64")]
            Kernel::ScalarFma => {
                (!std::arch::is_x86_feature_detected!("fma")).then_some("the CPU lacks FMA")
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => {
                let features = std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c");
                if !features {
                    Some("the CPU lacks AVX2, FMA or F16C")
                } else if !avx2::float_available() {
                    Some("the CPU's DAZ/FTZ failed the section 10 self-check")
                } else {
                    None
                }
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                if !std::arch::is_x86_feature_detected!("avx512f") {
                    Some("the CPU lacks AVX-512F")
                } else if !avx512::float_available() {
                    Some("the CPU's DAZ/FTZ failed the section 10 self-check")
                } else {
                    None
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => Some("not an x86-64 target"),
        }
    }
}

/// Runs `kernel`'s integer product on `c`; false (and `c` untouched) when the CPU lacks it.
fn run_int8(
    kernel: Kernel,
    c: &mut Tile,
    a: &Tile,
    b: &Tile,
    (m, n, k): (usize, usize, usize),
    (a_signed, b_signed): (bool, bool),
) -> bool {
    if kernel.int8_missing().is_some() {
        return false;
    }
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: int8_missing() just confirmed AVX2.
        Kernel::Avx2 => unsafe {
            // The same product on operands extended beforehand, as the emulator keeps them
            // (`Form::Bytes`), must give the same bits.
            let (mut aw, mut bw) = (Widened::ZERO, Widened::ZERO);
            avx2::extend(a, a_signed, &mut aw);
            avx2::extend(b, b_signed, &mut bw);
            let mut kept = *c;
            avx2::dot_int8_extended(&mut kept, &aw, &bw, m, n, k);
            avx2::dot_int8(c, a, b, m, n, k, a_signed, b_signed);
            assert!(
                kept == *c,
                "AVX2 on extended operands, {m}x{n}x{k}, signs {a_signed} {b_signed}"
            );
        },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: int8_missing() just confirmed AVX2 and AVX-VNNI.
        Kernel::AvxVnni => unsafe { avx_vnni::dot_int8(c, a, b, m, n, k, a_signed, b_signed) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: int8_missing() just confirmed AVX-512F, AVX-512BW and AVX-512 VNNI.
        Kernel::Avx512 => unsafe { avx512::dot_int8(c, a, b, m, n, k, a_signed, b_signed) },
        _ => scalar::dot_int8_portable(c, a, b, clamp(m, n, k), a_signed, b_signed),
    }
    true
}

/// Runs `kernel`'s floating-point product on `c`; false (and `c` untouched) when the CPU
/// lacks it.
#[allow(clippy::too_many_arguments)]
fn run_half(
    kernel: Kernel,
    c: &mut Tile,
    a: &Tile,
    b: &Tile,
    m: usize,
    n: usize,
    k: usize,
    half: Half,
) -> bool {
    if kernel.float_missing().is_some() {
        return false;
    }
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: float_missing() just confirmed FMA.
        Kernel::ScalarFma => unsafe { scalar::dot_half_fma(c, a, b, m, n, k, half) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: float_missing() just confirmed AVX2, FMA and F16C.
        Kernel::Avx2 => unsafe { avx2::dot_half(c, a, b, m, n, k, half) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: float_missing() just confirmed AVX-512F.
        Kernel::Avx512 => unsafe { avx512::dot_half(c, a, b, m, n, k, half) },
        _ => scalar::dot_half_portable(c, a, b, m, n, k, half),
    }
    true
}

/// Reports that a kernel was not tested and why, as a visible skip: written to stderr
/// directly, which the test harness does not capture (unlike `eprintln!`). A kernel the CPU
/// lacks is not applicable here, not missing AMX hardware. (Not through the workspace's
/// test-support crate: these tests ship with the published crate, which cannot depend on it.)
fn report_skipped(kernel: Kernel, why: &str) {
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped: the {} was not run: {why}",
        kernel.name()
    );
}

/// Runs every TDPBF16PS/TDPFP16PS path this CPU supports, asserts they all agree with the exact
/// model on every bit of C, and returns the result.
fn all_half_paths(c: &Tile, a: &Tile, b: &Tile, m: usize, n: usize, k: usize, half: Half) -> Tile {
    let want = oracle_half(c, a, b, m, n, k, half);
    let ctx = |r: usize, d: usize| {
        let pairs: Vec<String> = (0..k)
            .map(|kk| format!("{:08X}*{:08X}", get_dword(a, r, kk), get_dword(b, kk, d)))
            .collect();
        format!(
            "{half:?} M={m} N={n} K={k}, C={:08X}, A*B pairs {}",
            get_dword(c, r, d),
            pairs.join(" ")
        )
    };
    for kernel in Kernel::FLOAT {
        let mut got = *c;
        if run_half(kernel, &mut got, a, b, m, n, k, half) {
            assert_same(kernel.name(), &got, &want, &ctx);
        }
    }
    let mut got = *c;
    match half {
        Half::Bf16 => dot_bf16(&mut got, a, b, m, n, k),
        Half::Fp16 => dot_fp16(&mut got, a, b, m, n, k),
    }
    assert_same("dispatch", &got, &want, &ctx);
    // The VDPBF16PS kernel on re-paired operands, where the CPU passed its check (even K
    // only; the emulator widens the operands for odd K). The forms start as finite garbage,
    // so a read of bytes the pairing did not write shows as a wrong value, not as a NaN that
    // the exact model would recompute.
    #[cfg(target_arch = "x86_64")]
    if half == Half::Bf16 && avx512::pairs_available() && k.min(DWORDS).is_multiple_of(2) {
        let garbage = Widened {
            even: [0x3F; 1024],
            odd: [0x3F; 1024],
        };
        let (mut aw, mut bw) = (garbage, garbage);
        let mut got = *c;
        // SAFETY: pairs_available found AVX-512F, AVX512BW and AVX512_BF16 and a VDPBF16PS
        // that passed the check; K clamped to 16 is even.
        unsafe {
            avx512::pair_tile(a, false, &mut aw);
            avx512::pair_tile(b, true, &mut bw);
            avx512::dot_bf16_paired(&mut got, (a, &aw), (b, &bw), (m, n, k));
        }
        assert_same("AVX-512 VDPBF16PS", &got, &want, &ctx);
    }
    want
}

/// One directed case: C element `c` and the `(A dword, B dword)` pairs of each k, replicated in
/// every row of A, every column of B and every element of C, and run both as a 1x1 product and
/// as a full 16x16 one (so every lane of both kernel row groups sees it). Returns the element.
fn directed(half: Half, c: u32, pairs: &[(u32, u32)]) -> u32 {
    let k = pairs.len();
    let a = tile_of(|_, d| pairs.get(d).map_or(0, |p| p.0));
    let b = tile_of(|r, _| pairs.get(r).map_or(0, |p| p.1));
    let ct = tile_of(|_, _| c);
    let one = all_half_paths(&ct, &a, &b, 1, 1, k, half);
    let full = all_half_paths(&ct, &a, &b, 16, 16, k, half);
    let v = get_dword(&one, 0, 0);
    for r in 0..16 {
        for d in 0..16 {
            assert_eq!(get_dword(&full, r, d), v, "full tile, C[{r}][{d}]");
        }
    }
    v
}

fn bf16_case(c: u32, pairs: &[(u32, u32)]) -> u32 {
    directed(Half::Bf16, c, pairs)
}

// bf16 constants for the directed cases.
const BF_ONE: u16 = 0x3F80;
/// 2^-63: the product of two is 2^-126.
const BF_2M63: u16 = 0x2000;
/// 2^-75 and -2^-75.
const BF_2M75: u16 = 0x1A00;
const BF_NEG_2M75: u16 = 0x9A00;
/// 2^-76.
const BF_2M76: u16 = 0x1980;
/// 2^-65 and -2^-65: their product, -2^-130, is tiny.
const BF_2M65: u16 = 0x1F00;
const BF_NEG_2M65: u16 = 0x9F00;
// Distinct NaNs. NaN1 is signalling, so its expected result also shows the quieting.
const NAN1: u16 = 0x7FA1;
const NAN1_Q32: u32 = 0x7FE1_0000;
const NAN2: u16 = 0xFFC2;
const NAN4: u16 = 0x7FC4;
const NAN5: u16 = 0xFF85;
const NAN5_Q32: u32 = 0xFFC5_0000;

// ---------------------------------------------------------------------------------------------
// Section 10 directed cases (hardware results)

#[test]
fn bf16_snan_c_is_quieted() {
    let v = bf16_case(0x7F81_2345, &[(pair(BF_ONE, 0), pair(BF_ONE, 0))]);
    assert_eq!(v, 0x7FC1_2345);
}

#[test]
fn bf16_snan_input_is_quieted() {
    let v = bf16_case(0, &[(pair(0x7F81, 0), pair(BF_ONE, 0))]);
    assert_eq!(v, 0x7FC1_0000);
}

#[test]
fn bf16_nan_a_beats_nan_b() {
    let v = bf16_case(0, &[(pair(NAN1, 0), pair(NAN2, 0))]);
    assert_eq!(v, NAN1_Q32);
}

#[test]
fn bf16_nan_even_lane_beats_odd_lane() {
    let v = bf16_case(0, &[(pair(NAN1, NAN4), pair(BF_ONE, BF_ONE))]);
    assert_eq!(v, NAN1_Q32);
}

#[test]
fn bf16_nan_c_beats_products() {
    let v = bf16_case(0xFFC0_1234, &[(pair(NAN1, 0), pair(BF_ONE, 0))]);
    assert_eq!(v, 0xFFC0_1234);
}

#[test]
fn bf16_product_nan_beats_accumulator_nan() {
    let v = bf16_case(
        0,
        &[
            (pair(NAN1, 0), pair(BF_ONE, 0)),
            (pair(NAN5, 0), pair(BF_ONE, 0)),
        ],
    );
    assert_eq!(v, NAN5_Q32);
}

#[test]
fn bf16_inf_times_denormal_is_default_nan() {
    let v = bf16_case(0, &[(pair(0x7F80, 0), pair(0x0001, 0))]);
    assert_eq!(v, 0xFFC0_0000);
}

#[test]
fn bf16_denormal_c_is_daz() {
    // C = 2^-127 plus a product of 2^-126: 2^-126, not 1.5 * 2^-126.
    let v = bf16_case(0x0040_0000, &[(pair(BF_2M63, 0), pair(BF_2M63, 0))]);
    assert_eq!(v, 0x0080_0000);
}

#[test]
fn bf16_chain_2m126_minus_2m150_flushes() {
    // te = 2^-126 - 2^-150: tiny at 24 bits (gradual underflow would round to 2^-126).
    let v = bf16_case(
        0,
        &[
            (pair(BF_2M63, 0), pair(BF_2M63, 0)),
            (pair(BF_NEG_2M75, 0), pair(BF_2M75, 0)),
        ],
    );
    assert_eq!(v, 0);
}

#[test]
fn bf16_chain_2m126_minus_2m151_rounds_up() {
    // te = 2^-126 - 2^-151: RN24 at an unbounded exponent gives 2^-126 (the tie goes to even),
    // so it is not flushed ("tiny before rounding" would give 0).
    let v = bf16_case(
        0,
        &[
            (pair(BF_2M63, 0), pair(BF_2M63, 0)),
            (pair(BF_NEG_2M75, 0), pair(BF_2M76, 0)),
        ],
    );
    assert_eq!(v, 0x0080_0000);
}

#[test]
fn bf16_neg_zero_c_with_zero_products_gives_pos_zero() {
    let neg_zero = 0x8000;
    let v = bf16_case(SIGN, &[(pair(neg_zero, neg_zero), pair(BF_ONE, BF_ONE))]);
    assert_eq!(v, 0, "the lanes start at +0");
}

#[test]
fn bf16_neg_zero_c_with_flushed_negative_tinies_gives_neg_zero() {
    let v = bf16_case(
        SIGN,
        &[(pair(BF_NEG_2M65, BF_NEG_2M65), pair(BF_2M65, BF_2M65))],
    );
    assert_eq!(v, SIGN);
}

// ---------------------------------------------------------------------------------------------
// Section 11: TDPFP16PS

#[test]
fn fp16_denormal_inputs_are_not_flushed() {
    // 2^-24 * 1.0 = 2^-24.
    let v = directed(Half::Fp16, 0, &[(pair(0x0001, 0), pair(0x3C00, 0))]);
    assert_eq!(v, 0x3380_0000);
    // 1023 * 2^-48 + 2^-48 = 2^-38: products of fp16 denormals, both lanes.
    let v = directed(
        Half::Fp16,
        0,
        &[(pair(0x03FF, 0x0001), pair(0x0001, 0x0001))],
    );
    assert_eq!(v, 0x2C80_0000);
}

#[test]
fn fp16_denormal_c_is_daz() {
    // -denormal + (+0): DAZ gives -0 + +0 = +0; without DAZ the sum would flush to -0.
    let v = directed(
        Half::Fp16,
        0x8000_0001,
        &[(pair(0, 0), pair(0x3C00, 0x3C00))],
    );
    assert_eq!(v, 0);
    let v = directed(Half::Fp16, 0x007F_FFFF, &[(pair(0, 0), pair(0, 0))]);
    assert_eq!(v, 0);
}

#[test]
fn fp16_nans_and_infinities() {
    // fp16 sNaN 0x7C01 -> fp32 payload 1 << 13, quieted.
    let v = directed(Half::Fp16, 0, &[(pair(0x7C01, 0), pair(0x3C00, 0))]);
    assert_eq!(v, 0x7FC0_2000);
    // inf * 0 -> default NaN; fp16 denormals are not zero, so inf * denormal is inf.
    let v = directed(Half::Fp16, 0, &[(pair(0x7C00, 0), pair(0, 0))]);
    assert_eq!(v, 0xFFC0_0000);
    let v = directed(Half::Fp16, 0, &[(pair(0x7C00, 0), pair(0x0001, 0))]);
    assert_eq!(v, INF);
}

/// FTZ applies to every step of TDPFP16PS, but it cannot show in its results: all products
/// and lane sums are multiples of 2^-48 (the square of the smallest fp16 denormal), and C plus
/// such a sum is zero or at least 2^-72 in magnitude. So the FTZ step function itself is tested,
/// with a tiny result from fp16-converted operands and a tiny-range accumulator.
#[test]
fn fp16_step_function_flushes() {
    let x = fp16_to_f32_bits(0x0400); // 2^-14, an fp16 value
    let y = 0x0780_0000; // 2^-112
    let y15 = 0x07C0_0000; // 1.5 * 2^-112
    let acc = 0x0100_0000; // 2^-125
                           // 2^-125 - 1.5 * 2^-126 = 2^-127: an exactly representable denormal, flushed.
    assert_eq!(fma32(x | SIGN, y15, acc), 0);
    assert_eq!(fma32(x, y15, acc | SIGN), SIGN);
    assert_eq!(fma32(x, y, 0), MIN_NORMAL);
}

// ---------------------------------------------------------------------------------------------
// Section 9: integer dot products

/// The plain reference: i64 sums of extended bytes, wrapped to 32 bits at the end.
#[allow(clippy::too_many_arguments)]
fn int8_reference(
    c: &Tile,
    a: &Tile,
    b: &Tile,
    m: usize,
    n: usize,
    k: usize,
    a_signed: bool,
    b_signed: bool,
) -> Tile {
    let ext = |x: u8, s: bool| if s { i64::from(x as i8) } else { i64::from(x) };
    let mut out = *c;
    for mi in 0..m {
        for ni in 0..n {
            let mut acc = i64::from(get_dword(c, mi, ni) as i32);
            for ki in 0..k {
                for i in 0..4 {
                    acc += ext(a[mi * 64 + 4 * ki + i], a_signed)
                        * ext(b[ki * 64 + 4 * ni + i], b_signed);
                }
            }
            set_dword(&mut out, mi, ni, acc as u32);
        }
    }
    out
}

/// Every integer path against the i64 reference; returns the result.
#[allow(clippy::too_many_arguments)]
fn all_int8_paths(
    c: &Tile,
    a: &Tile,
    b: &Tile,
    m: usize,
    n: usize,
    k: usize,
    a_signed: bool,
    b_signed: bool,
) -> Tile {
    let want = int8_reference(c, a, b, m, n, k, a_signed, b_signed);
    let ctx =
        |_: usize, _: usize| format!("M={m} N={n} K={k} a_signed={a_signed} b_signed={b_signed}");
    for kernel in Kernel::INT8 {
        let mut got = *c;
        if run_int8(kernel, &mut got, a, b, (m, n, k), (a_signed, b_signed)) {
            assert_same(kernel.name(), &got, &want, &ctx);
        }
    }
    let mut got = *c;
    dot_int8(&mut got, a, b, m, n, k, a_signed, b_signed);
    assert_same("dispatch int8", &got, &want, &ctx);
    want
}

/// Full 16x16x16 product with every A byte `a_byte`, every B byte `b_byte`, every C `c0`.
fn int8_uniform(c0: u32, a_byte: u8, b_byte: u8, a_signed: bool, b_signed: bool) -> Tile {
    let c = tile_of(|_, _| c0);
    let a = [a_byte; 1024];
    let b = [b_byte; 1024];
    all_int8_paths(&c, &a, &b, 16, 16, 16, a_signed, b_signed)
}

fn assert_all(t: &Tile, v: u32) {
    for r in 0..16 {
        for d in 0..16 {
            assert_eq!(get_dword(t, r, d), v, "C[{r}][{d}]");
        }
    }
}

#[test]
fn int8_ss_wraps() {
    // 0x7FFFFFF0 + 64 * (-128 * -128)
    assert_all(
        &int8_uniform(0x7FFF_FFF0, 0x80, 0x80, true, true),
        0x800F_FFF0,
    );
}

#[test]
fn int8_uu_wraps() {
    // 0x7FFFFFF0 + 64 * (255 * 255)
    assert_all(
        &int8_uniform(0x7FFF_FFF0, 0xFF, 0xFF, false, false),
        0x803F_8030,
    );
}

#[test]
fn int8_su_wraps() {
    // 0x80000005 + 64 * (-128 * 255)
    assert_all(
        &int8_uniform(0x8000_0005, 0x80, 0xFF, true, false),
        0x7FE0_2005,
    );
}

#[test]
fn int8_us_wraps() {
    // 0x80000005 + 64 * (255 * -128)
    assert_all(
        &int8_uniform(0x8000_0005, 0xFF, 0x80, false, true),
        0x7FE0_2005,
    );
}

/// Random bytes biased towards the extremes, C towards the wrap points, a random signedness
/// and (one time in seven the full) shape.
#[allow(clippy::type_complexity)]
fn random_int8_case(
    rng: &mut Rng,
    iter: usize,
) -> (Tile, Tile, Tile, (usize, usize, usize), (bool, bool)) {
    let signs = (iter & 1 != 0, iter & 2 != 0);
    let byte = |r: &mut Rng| match r.below(4) {
        0 => [0x00, 0x7F, 0x80, 0xFF][r.below(4) as usize],
        _ => r.u32() as u8,
    };
    let mut a = [0u8; 1024];
    let mut b = [0u8; 1024];
    a.iter_mut().for_each(|x| *x = byte(rng));
    b.iter_mut().for_each(|x| *x = byte(rng));
    let c = tile_of(|_, _| {
        let base = [0x7FFF_FF00, 0x8000_0100, 0, rng.u32()][rng.below(4) as usize];
        base ^ (rng.u32() & 0xFFF)
    });
    let dims = |r: &mut Rng| 1 + r.below(16) as usize;
    let shape = if iter.is_multiple_of(7) {
        (16, 16, 16)
    } else {
        (dims(rng), dims(rng), dims(rng))
    };
    (c, a, b, shape, signs)
}

#[test]
fn int8_differential_all_signedness() {
    let mut rng = Rng(0x1D8_5EED);
    for iter in 0..1200 {
        let (c, a, b, (m, n, k), (sa, sb)) = random_int8_case(&mut rng, iter);
        all_int8_paths(&c, &a, &b, m, n, k, sa, sb);
    }
}

/// One row of A (a GEMV's tiles, which the AVX-512 kernel runs on its own, its bias correction
/// summed in 16-bit lanes): every signedness, bytes at the extremes (all 0x80 and 0xFF B
/// columns make the 16-bit correction sums largest), every n and k.
#[test]
fn int8_one_row_differential() {
    let mut rng = Rng(0x010E_5EED);
    for iter in 0..800 {
        let (c, mut a, mut b, (_, n, k), (sa, sb)) = random_int8_case(&mut rng, iter);
        if iter % 5 == 0 {
            let extreme = [0x80u8, 0xFF, 0x7F, 0x00][iter / 5 % 4];
            b.fill(extreme);
            a.fill(extreme ^ 0x5A);
        }
        all_int8_paths(&c, &a, &b, 1, n, k, sa, sb);
    }
}

/// TDPBSSD given A's row corrections (as the emulator keeps them per tile) against the i64
/// reference, for every K and several M and N; and corrections kept for another K than the
/// product's are not used. Where the kernel reads no corrections there are none to keep.
#[test]
fn int8_ss_with_kept_row_corrections() {
    let mut rng = Rng(0x5EED_C0AA);
    for iter in 0..200 {
        let (c, a, b, _, _) = random_int8_case(&mut rng, iter);
        let k = iter % 17;
        let (m, n) = [(16, 16), (16, 5), (9, 16), (1, 1)][iter % 4];
        let want = int8_reference(&c, &a, &b, m, n, k, true, true);
        let ctx = |_: usize, _: usize| format!("M={m} N={n} K={k}");
        let mut kept = RowCorrections::NONE;
        if !kept.update(&a, k) {
            assert_ne!(int8_path(), KernelPath::Avx512);
            assert_eq!(kept.k_dwords(), None);
            return;
        }
        assert_eq!(kept.k_dwords(), Some(k));
        let mut got = c;
        dot_int8_ss_corrected(&mut got, &a, &b, (m, n, k), &kept);
        assert_same("kept row corrections", &got, &want, &ctx);
        let mut other = RowCorrections::NONE;
        assert!(other.update(&a, (k + 5) % 17));
        let mut got = c;
        dot_int8_ss_corrected(&mut got, &a, &b, (m, n, k), &other);
        assert_same("row corrections of another K", &got, &want, &ctx);
        let mut got = c;
        dot_int8_ss_corrected(&mut got, &a, &b, (m, n, k), &RowCorrections::NONE);
        assert_same("no row corrections", &got, &want, &ctx);
    }
}

/// The integer products on one kernel only, whatever the dispatch picks: the wrap-around
/// extremes of every signedness and random shapes, against the i64 reference. A kernel the
/// CPU lacks is reported as skipped.
fn forced_int8(kernel: Kernel) {
    if let Some(why) = kernel.int8_missing() {
        report_skipped(kernel, why);
        return;
    }
    let check = |c: &Tile, a: &Tile, b: &Tile, shape: (usize, usize, usize), s: (bool, bool)| {
        let (m, n, k) = shape;
        let want = int8_reference(c, a, b, m, n, k, s.0, s.1);
        let mut got = *c;
        assert!(run_int8(kernel, &mut got, a, b, shape, s));
        let ctx = |_: usize, _: usize| format!("M={m} N={n} K={k} signedness {s:?}");
        assert_same(kernel.name(), &got, &want, &ctx);
    };
    for (c0, x, y) in [
        (0x7FFF_FFF0, 0x80, 0x80),
        (0x7FFF_FFF0, 0xFF, 0xFF),
        (0x8000_0005, 0x80, 0xFF),
        (0x8000_0005, 0xFF, 0x80),
        (0, 0x7F, 0x80),
    ] {
        for s in [(true, true), (true, false), (false, true), (false, false)] {
            check(&tile_of(|_, _| c0), &[x; 1024], &[y; 1024], (16, 16, 16), s);
        }
    }
    let mut rng = Rng(0x1D8_F0CE);
    for iter in 0..400 {
        let (c, a, b, shape, s) = random_int8_case(&mut rng, iter);
        check(&c, &a, &b, shape, s);
    }
}

#[test]
fn int8_kernel_portable() {
    forced_int8(Kernel::Portable);
}

#[test]
fn int8_kernel_avx2() {
    forced_int8(Kernel::Avx2);
}

#[test]
fn int8_kernel_avx_vnni() {
    forced_int8(Kernel::AvxVnni);
}

#[test]
fn int8_kernel_avx512() {
    forced_int8(Kernel::Avx512);
}

/// The values of `KERNELS_ENV`, as a user may spell them.
#[test]
fn kernel_cap_values() {
    for (text, want) in [
        ("avx512-bf16", PAIRS_RANK),
        ("AVX512BF16", PAIRS_RANK),
        ("avx512", rank(KernelPath::Avx512)),
        (" AVX-512 ", rank(KernelPath::Avx512)),
        ("avx-vnni", rank(KernelPath::AvxVnni)),
        ("AvxVnni", rank(KernelPath::AvxVnni)),
        ("avx2\n", rank(KernelPath::Avx2)),
        ("portable", rank(KernelPath::Portable)),
        ("", u8::MAX),
        ("auto", u8::MAX),
        ("sse2", u8::MAX),
    ] {
        assert_eq!(cap_of(text), want, "{text:?}");
    }
    // The order of the cap: each path allows itself and the ones below.
    assert!(rank(KernelPath::Portable) < rank(KernelPath::Avx2));
    assert!(rank(KernelPath::Avx2) < rank(KernelPath::AvxVnni));
    assert!(rank(KernelPath::AvxVnni) < rank(KernelPath::Avx512));
    assert!(rank(KernelPath::Avx512) < PAIRS_RANK);
}

/// The bf16 kernels run VDPBF16PS exactly where the float path is AVX-512, the cap allows them,
/// the CPU has AVX512BW and AVX512_BF16, and its VDPBF16PS agrees with two `fma32` steps on the
/// check's lanes, run again here.
#[test]
fn bf16_pairs_follow_the_path_the_cap_and_the_check() {
    #[cfg(target_arch = "x86_64")]
    let want = float_path() == KernelPath::Avx512
        && kernel_cap() >= PAIRS_RANK
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512bf16")
        && pairs::self_check(|acc, a, b| {
            // SAFETY: AVX-512F (the float path) and AVX512_BF16 were found just before.
            unsafe { avx512::dpbf16_lanes(acc, a, b) }
        });
    #[cfg(not(target_arch = "x86_64"))]
    let want = false;
    assert_eq!(bf16_pairs(), want);
}

/// The dispatch runs the best integer kernel the CPU has, within the cap of `KERNELS_ENV`.
#[test]
fn int8_dispatch_picks_the_best_kernel() {
    let best = [
        (Kernel::Avx512, KernelPath::Avx512),
        (Kernel::AvxVnni, KernelPath::AvxVnni),
        (Kernel::Avx2, KernelPath::Avx2),
        (Kernel::Portable, KernelPath::Portable),
    ]
    .into_iter()
    .filter(|&(_, p)| rank(p) <= kernel_cap())
    .find(|(k, _)| k.int8_missing().is_none())
    .map(|(_, p)| p);
    assert_eq!(Some(int8_path()), best);
}

// ---------------------------------------------------------------------------------------------
// Scalar pieces

#[test]
fn fp16_conversion_is_exact_for_all_values() {
    for h in 0..=u16::MAX {
        let bits = fp16_to_f32_bits(h);
        let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
        let exp = i32::from((h >> 10) & 0x1F);
        let frac = f64::from(h & 0x3FF);
        match exp {
            0x1F if frac == 0.0 => assert_eq!(bits, u32::from(h & 0x8000) << 16 | INF),
            0x1F => assert_eq!(
                bits,
                u32::from(h & 0x8000) << 16 | INF | u32::from(h & 0x3FF) << 13
            ),
            _ => {
                let want = if exp == 0 {
                    sign * frac * 2f64.powi(-24)
                } else {
                    sign * (1024.0 + frac) * 2f64.powi(exp - 25)
                };
                let got = f64::from(f32::from_bits(bits));
                assert!(
                    got == want && got.is_sign_negative() == (sign < 0.0),
                    "{h:04X}"
                );
            }
        }
    }
    assert_eq!(bf16_to_f32_bits(0xABCD), 0xABCD_0000);
}

#[test]
fn fma32_basic_cases() {
    let one = ONE;
    let two = 0x4000_0000;
    assert_eq!(fma32(one, one, 0), one);
    assert_eq!(fma32(one, one, one), two);
    assert_eq!(fma32(one, one, one | SIGN), 0, "exact cancellation is +0");
    assert_eq!(fma32(SIGN, one, SIGN), SIGN, "-0 + -0");
    assert_eq!(fma32(SIGN, one, 0), 0, "-0 + +0");
    assert_eq!(fma32(0x7F7F_FFFF, two, 0), INF, "overflow");
    assert_eq!(fma32(0x7F7F_FFFF | SIGN, two, 0), INF | SIGN, "overflow");
    // 1 + 2^-24 is a tie: to even (1.0); 1 + 3*2^-24 rounds up to 1 + 2^-22.
    assert_eq!(fma32(one, one, 0x3380_0000), one);
    assert_eq!(fma32(0x3FC0_0000, 0x3400_0000, one), 0x3F80_0002);
    assert_eq!(
        fma32(INF, 0x0000_0001, one),
        DEFAULT_NAN,
        "DAZ before inf*0"
    );
    assert_eq!(fma32(INF, one, INF | SIGN), DEFAULT_NAN);
    assert_eq!(fma32(INF, one, INF), INF);
    assert_eq!(fma32(one, one, INF | SIGN), INF | SIGN);
    assert_eq!(fma32(0x7F80_0001, 0x7FC0_0002, 0xFF80_0003), 0x7FC0_0001);
    assert_eq!(fma32(one, 0x7F80_0002, 0xFF80_0003), 0x7FC0_0002);
    assert_eq!(fma32(INF, 0, 0xFF80_0003), 0xFFC0_0003, "NaN beats inf*0");
    assert_eq!(add32(0x0080_0000, 0x8000_0001), 0x0080_0000, "DAZ in add32");
    assert_eq!(
        add32(0x0100_0000, 0x8080_0001),
        0,
        "2^-125 - (2^-126 + ulp) is tiny"
    );
    assert_eq!(add32(0x7FC0_0001, 0x7FC0_0002), 0x7FC0_0001);
    assert_eq!(add32(0x7F80_0000, 0xFF80_0000), DEFAULT_NAN);
}

#[test]
fn fma32_sticky_bits_far_below_the_product_decide_ties() {
    // (1 + 2^-23) * 1.5 = 1.5 + 2^-23 + 2^-24: exactly halfway between two floats.
    let (x, y) = (0x3F80_0001, 0x3FC0_0000);
    let acc = 0x0080_0001; // ~2^-126: entirely below the alignment frame, only a sticky bit
    for f in [fma32, scalar::fma32_fast] {
        assert_eq!(f(x, y, 0), 0x3FC0_0002, "tie to even");
        assert_eq!(f(x, y, acc), 0x3FC0_0002, "above the tie");
        assert_eq!(f(x, y, acc | SIGN), 0x3FC0_0001, "below the tie");
        assert_eq!(f(x | SIGN, y, acc), 0xBFC0_0001, "below the tie, negative");
    }
}

#[test]
fn fma32_threshold_decided_below_f64_precision() {
    // X = 2^23 + 2048 and Y = 2^24 - 4095 give XY = 2^47 + 2^11, so x*y = 2^-151 + 2^-187 and
    // v = 2^-126 - x*y lies 2^-187 below the flush threshold 2^-126 - 2^-151: closer than half
    // an f64 ulp there (2^-180), so RN53(v) is the threshold itself and only the exact error
    // term tells that v must be flushed. IEEE fma rounds v to exactly 2^-126.
    let (x, y, acc) = (0x1980_0800, 0x19FF_F001, MIN_NORMAL);
    for f in [fma32, scalar::fma32_fast] {
        assert_eq!(f(x | SIGN, y, acc), 0);
        assert_eq!(f(x, y, acc | SIGN), SIGN);
    }
    assert_eq!(
        f32::from_bits(x | SIGN)
            .mul_add(f32::from_bits(y), f32::from_bits(acc))
            .to_bits(),
        MIN_NORMAL
    );
}

/// A special-heavy fp32 value.
fn f32_special(r: &mut Rng) -> u32 {
    let s = r.sign32();
    match r.below(13) {
        0 => s,
        1 => s | (r.u32() & FRAC_MASK).max(1),
        // Few significant bits, so that products are often exact ties.
        12 => s | ((120 + r.below(16)) << 23) | (r.u32() & 0x70_0001),
        2 => s | INF,
        3 => s | INF | QUIET | (r.u32() & 0x3F_FFFF),
        4 => s | INF | (r.u32() & 0x3F_FFFF).max(1),
        5 => s | (MIN_NORMAL + r.below(9)).wrapping_sub(4),
        6 => s | ((1 + r.below(6)) << 23) | (r.u32() & FRAC_MASK),
        7 => s | (ONE + r.below(64)).wrapping_sub(32),
        8 => s | ((248 + r.below(7)) << 23) | (r.u32() & FRAC_MASK),
        9 => s | ((20 + r.below(40)) << 23) | (r.u32() & FRAC_MASK),
        _ => r.u32(),
    }
}

#[test]
fn scalar_fma_matches_exact_on_random_triples() {
    let mut rng = Rng(0xF3A_0001);
    let one = |r: &mut Rng| f32_special(r);
    for i in 0..1_000_000 {
        let (x, y) = (one(&mut rng), one(&mut rng));
        // Every third triple puts acc right at -x*y (give or take rounding), to land results
        // on and around 2^-126 and on exact cancellation.
        let acc = if i % 3 == 0 {
            let p = scalar::fma32_fast(x, y, 0) ^ SIGN;
            p.wrapping_add(rng.below(5)).wrapping_sub(2)
        } else {
            one(&mut rng)
        };
        assert_eq!(
            scalar::fma32_fast(x, y, acc),
            fma32(x, y, acc),
            "fma32({x:08X}, {y:08X}, {acc:08X})"
        );
        assert_eq!(
            scalar::add32_fast(x, acc),
            add32(x, acc),
            "add32({x:08X}, {acc:08X})"
        );
    }
}

#[test]
fn scalar_fma_matches_exact_around_min_normal() {
    // Exact results within a few 2^-149 of +-2^-126, on both sides of the flush threshold
    // 2^-126 - 2^-151, so that the "IEEE result is exactly 2^-126" decision is exercised.
    let mut rng = Rng(0x2_126);
    let f32_of = |v: f64| f32::from_bits((v as f32).to_bits());
    for i in 0..600_000 {
        let s = rng.sign32();
        let (x, y, acc) = if i % 3 == 2 {
            // X = 2^23 + u, Y = 2^24 - (2u - 1): XY = 2^47 + 2^23 - u(2u - 1), within about
            // 2^20 of 2^47, so v = 2^-126 - x*y falls within f64 precision of the threshold.
            let u = 1800 + rng.below(500);
            let x = (51 << 23) | u;
            let y = (51 << 23) | (0x7F_FFFF - (2 * u - 1) + 1);
            (x | SIGN, y, MIN_NORMAL + rng.below(2))
        } else if i % 3 == 0 {
            // acc = 2^-126 + j * 2^-149 plus a product of magnitude 2^-152..2^-148.
            let acc = MIN_NORMAL + rng.below(3);
            let ex = 30 + rng.below(60);
            let ey = 127 + 127 - 150 - ex + rng.below(5) - 2;
            let x = rng.sign32() | (ex << 23) | (rng.u32() & FRAC_MASK);
            let y = (ey << 23) | (rng.u32() & FRAC_MASK);
            (x, y, acc | s)
        } else {
            // acc = +-2^-125 (give or take an ulp), product close to -+2^-126 (within ulps).
            let acc = 0x0100_0000 + rng.below(3);
            let x = (20 + rng.below(90)) << 23 | (rng.u32() & FRAC_MASK);
            let q = f32_of(2f64.powi(-126) / f64::from(f32::from_bits(x)));
            let y = q.to_bits().wrapping_add(rng.below(7)).wrapping_sub(3);
            (x | SIGN, y, acc)
        };
        let (x, acc) = (x ^ s, acc ^ s);
        assert_eq!(
            scalar::fma32_fast(x, y, acc),
            fma32(x, y, acc),
            "fma32({x:08X}, {y:08X}, {acc:08X})"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Tile-level differential tests

/// A special-heavy 16-bit element of the given format, or one whose products land near 2^-126.
fn half_special(r: &mut Rng, half: Half) -> u16 {
    let s = (r.u32() & 0x8000) as u16;
    let rnd = r.u32() as u16;
    match half {
        Half::Bf16 => match r.below(11) {
            0 => s,
            1 => s | (rnd & 0x7F).max(1),
            2 => s | 0x7F80,
            3 => s | 0x7FC0 | (rnd & 0x3F),
            4 => s | 0x7F80 | (rnd & 0x3F).max(1),
            // exponents 61..=67: products around 2^-126
            5 | 6 => s | ((61 + r.below(7) as u16) << 7) | (rnd & 0x7F),
            7 => s | ((126 + r.below(3) as u16) << 7) | (rnd & 0x7F),
            8 => s | ((1 + r.below(254) as u16) << 7) | (rnd & 0x7F),
            9 => s | ((250 + r.below(5) as u16) << 7) | (rnd & 0x7F),
            _ => rnd,
        },
        Half::Fp16 => match r.below(10) {
            0 => s,
            1 | 2 => s | (rnd & 0x3FF).max(1),
            3 => s | 0x7C00,
            4 => s | 0x7E00 | (rnd & 0x1FF),
            5 => s | 0x7C00 | (rnd & 0x1FF).max(1),
            6 => s | ((14 + r.below(3) as u16) << 10) | (rnd & 0x3FF),
            7 => s | 0x7BFF,
            _ => rnd,
        },
    }
}

/// Random tiles for a floating-point product: special-heavy elements, and in some k steps the
/// next step's products made to (nearly) cancel the previous ones.
fn random_half_tiles(r: &mut Rng, half: Half) -> (Tile, Tile, Tile) {
    let mut a = [0u8; 1024];
    let mut b = [0u8; 1024];
    for row in 0..16 {
        for d in 0..16 {
            let v = pair(half_special(r, half), half_special(r, half));
            set_dword(&mut a, row, d, v);
            let v = pair(half_special(r, half), half_special(r, half));
            set_dword(&mut b, row, d, v);
        }
    }
    for k in 1..16 {
        if r.below(3) == 0 {
            // B row k = -(B row k-1), A column k = A column k-1 with low bits nudged.
            for d in 0..16 {
                let v = get_dword(&b, k - 1, d) ^ 0x8000_8000;
                set_dword(&mut b, k, d, v);
            }
            for row in 0..16 {
                let nudge = if r.below(2) == 0 {
                    0
                } else {
                    r.u32() & 0x0003_0003
                };
                let v = get_dword(&a, row, k - 1) ^ nudge;
                set_dword(&mut a, row, k, v);
            }
        }
    }
    let mut c = [0u8; 1024];
    for row in 0..16 {
        for d in 0..16 {
            set_dword(&mut c, row, d, f32_special(r));
        }
    }
    (c, a, b)
}

fn half_differential(half: Half, seed: u64, iters: usize) {
    let mut rng = Rng(seed);
    for iter in 0..iters {
        let (c, a, b) = random_half_tiles(&mut rng, half);
        let dims = |r: &mut Rng| 1 + r.below(16) as usize;
        let (m, n, k) = if iter % 5 == 0 {
            (16, 16, 16)
        } else {
            (dims(&mut rng), dims(&mut rng), dims(&mut rng))
        };
        all_half_paths(&c, &a, &b, m, n, k, half);
    }
}

#[test]
fn bf16_differential_special_heavy() {
    half_differential(Half::Bf16, 0xBF16_0001, 1500);
}

#[test]
fn fp16_differential_special_heavy() {
    half_differential(Half::Fp16, 0xF016_0001, 800);
}

/// One to eight rows of A (a GEMV's tiles, or a few tokens': up to four the kernels compute
/// with B converted in registers): special values, and moderate ones whose every lane is the
/// kernel's own sum.
#[test]
fn half_few_rows_differential() {
    let mut rng = Rng(0x000E_1234);
    for half in [Half::Bf16, Half::Fp16] {
        for iter in 0..600 {
            let (c, a, b) = if iter % 2 == 0 {
                random_half_tiles(&mut rng, half)
            } else {
                moderate_tiles(&mut rng, half)
            };
            let m = 1 + iter % 8;
            let n = 1 + rng.below(16) as usize;
            let k = if iter % 7 == 0 {
                0
            } else {
                1 + rng.below(16) as usize
            };
            all_half_paths(&c, &a, &b, m, n, k, half);
        }
    }
}

/// Tiles of finite values with exponents near 63, so te and to wander around 2^-126 for the
/// whole chain, with C also near 2^-126.
fn tiny_chain_tiles(rng: &mut Rng) -> (Tile, Tile, Tile) {
    let el = |r: &mut Rng| {
        let s = (r.u32() & 0x8000) as u16;
        s | ((60 + r.below(8) as u16) << 7) | (r.u32() as u16 & 0x7F)
    };
    let a = tile_of(|_, _| pair(el(rng), el(rng)));
    let b = tile_of(|_, _| pair(el(rng), el(rng)));
    let c = tile_of(|_, _| rng.sign32() | ((rng.below(4)) << 23) | (rng.u32() & FRAC_MASK));
    (c, a, b)
}

#[test]
fn bf16_differential_tiny_chains() {
    let mut rng = Rng(0x7111_7111);
    for _ in 0..600 {
        let (c, a, b) = tiny_chain_tiles(&mut rng);
        let k = 1 + rng.below(16) as usize;
        all_half_paths(&c, &a, &b, 16, 16, k, Half::Bf16);
    }
}

/// Tiles of moderate finite values (magnitudes 2^-8 to 2^8, no NaN, infinity or denormal),
/// with C likewise: every lane of the result is the kernel's own sum, never one the exact
/// model recomputes for a NaN, so a kernel reading a wrong operand shows.
fn moderate_tiles(rng: &mut Rng, half: Half) -> (Tile, Tile, Tile) {
    let el = |r: &mut Rng| -> u16 {
        let sign = (r.u32() & 0x8000) as u16;
        match half {
            Half::Bf16 => sign | ((119 + r.below(17) as u16) << 7) | (r.u32() as u16 & 0x7F),
            Half::Fp16 => sign | ((7 + r.below(17) as u16) << 10) | (r.u32() as u16 & 0x3FF),
        }
    };
    let a = tile_of(|_, _| pair(el(rng), el(rng)));
    let b = tile_of(|_, _| pair(el(rng), el(rng)));
    let c = tile_of(|_, _| rng.sign32() | ((119 + rng.below(17)) << 23) | (rng.u32() & FRAC_MASK));
    (c, a, b)
}

/// The floating-point products on one kernel only, whatever the dispatch picks: special-heavy
/// bf16 and fp16 tiles and chains around 2^-126 in random shapes, against the exact model. A
/// kernel the CPU lacks is reported as skipped.
fn forced_half(kernel: Kernel) {
    if let Some(why) = kernel.float_missing() {
        report_skipped(kernel, why);
        return;
    }
    let mut rng = Rng(0x0F0C_ED16);
    for iter in 0..600 {
        let half = if iter % 3 == 2 {
            Half::Fp16
        } else {
            Half::Bf16
        };
        let (c, a, b) = match iter % 4 {
            3 => tiny_chain_tiles(&mut rng),
            1 => moderate_tiles(&mut rng, half),
            _ => random_half_tiles(&mut rng, half),
        };
        let dims = |r: &mut Rng| 1 + r.below(16) as usize;
        let (m, n, k) = if iter % 5 == 0 {
            (16, 16, 16)
        } else {
            (dims(&mut rng), dims(&mut rng), dims(&mut rng))
        };
        let want = oracle_half(&c, &a, &b, m, n, k, half);
        let mut got = c;
        assert!(run_half(kernel, &mut got, &a, &b, m, n, k, half));
        let ctx = |r: usize, d: usize| {
            format!("{half:?} M={m} N={n} K={k}, C={:08X}", get_dword(&c, r, d))
        };
        assert_same(kernel.name(), &got, &want, &ctx);
    }
}

#[test]
fn float_kernel_portable() {
    forced_half(Kernel::Portable);
}

#[test]
fn float_kernel_scalar_fma() {
    forced_half(Kernel::ScalarFma);
}

#[test]
fn float_kernel_avx2() {
    forced_half(Kernel::Avx2);
}

#[test]
fn float_kernel_avx512() {
    forced_half(Kernel::Avx512);
}

/// The dispatch runs the best floating-point kernel the CPU has, within the cap of
/// `KERNELS_ENV` (the scalar FMA variant is part of the portable path).
#[test]
fn float_dispatch_picks_the_best_kernel() {
    let best = [
        (Kernel::Avx512, KernelPath::Avx512),
        (Kernel::Avx2, KernelPath::Avx2),
        (Kernel::Portable, KernelPath::Portable),
    ]
    .into_iter()
    .filter(|&(_, p)| rank(p) <= kernel_cap())
    .find(|(k, _)| k.float_missing().is_none())
    .map(|(_, p)| p);
    assert_eq!(Some(float_path()), best);
}

// ---------------------------------------------------------------------------------------------
// Contract details

#[test]
fn only_the_shape_is_written() {
    let mut rng = Rng(42);
    let junk = tile_of(|_, _| rng.u32());
    let a = tile_of(|_, _| 0x3F80_3F80);
    let b = tile_of(|_, _| 0x3C00_3C00);
    for &(m, n, k) in &[(1, 1, 1), (3, 5, 2), (9, 16, 16), (16, 7, 4), (8, 8, 8)] {
        for half in [Half::Bf16, Half::Fp16] {
            let out = all_half_paths(&junk, &a, &b, m, n, k, half);
            for r in 0..16 {
                for d in 0..16 {
                    if r >= m || d >= n {
                        assert_eq!(get_dword(&out, r, d), get_dword(&junk, r, d));
                    }
                }
            }
        }
        for (sa, sb) in [(false, false), (true, false), (false, true), (true, true)] {
            let out = all_int8_paths(&junk, &a, &b, m, n, k, sa, sb);
            for r in 0..16 {
                for d in 0..16 {
                    if r >= m || d >= n {
                        assert_eq!(get_dword(&out, r, d), get_dword(&junk, r, d));
                    }
                }
            }
        }
    }
}

#[test]
fn degenerate_and_oversized_shapes_do_not_panic() {
    let mut rng = Rng(7);
    let (c, a, b) = random_half_tiles(&mut rng, Half::Bf16);
    // K = 0: C = add32(C, +0 + +0), i.e. C DAZ'd and -0 turned into +0.
    let out = all_half_paths(&c, &a, &b, 16, 16, 0, Half::Bf16);
    for r in 0..16 {
        for d in 0..16 {
            assert_eq!(get_dword(&out, r, d), add32(get_dword(&c, r, d), 0));
        }
    }
    all_half_paths(&c, &a, &b, 0, 16, 16, Half::Fp16);
    all_half_paths(&c, &a, &b, 16, 0, 16, Half::Fp16);
    all_int8_paths(&c, &a, &b, 0, 0, 0, true, true);
    for (m, n, k) in [
        (17, 16, 16),
        (16, 99, 16),
        (16, 16, 1000),
        (usize::MAX, usize::MAX, usize::MAX),
    ] {
        let mut t = c;
        dot_bf16(&mut t, &a, &b, m, n, k);
        assert_eq!(t, oracle_half(&c, &a, &b, 16, 16, 16, Half::Bf16));
        dot_fp16(&mut t, &a, &b, m, n, k);
        dot_int8(&mut t, &a, &b, m, n, k, false, true);
        scalar::dot_half_portable(&mut t, &a, &b, m, n, k, Half::Bf16);
        scalar::dot_int8_portable(&mut t, &a, &b, clamp(m, n, k), true, false);
    }
}

/// On any host whose DAZ/FTZ follow the Intel SDM (Intel and AMD cores with AVX-512 do) the
/// AVX-512 float kernel passes its start-up self-check, so the dispatch really uses it.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_float_kernel_is_used_when_avx512f_is_present() {
    if std::arch::is_x86_feature_detected!("avx512f") {
        assert!(
            avx512::float_available(),
            "the CPU has AVX-512F but its DAZ/FTZ failed the section 10 self-check"
        );
    }
}

/// The MXCSR switch of the AVX-512 kernel must not leak: control bits and flags come back.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx512_kernel_restores_mxcsr() {
    fn mxcsr() -> u32 {
        let mut v = 0u32;
        // SAFETY: STMXCSR writes 4 bytes to a live local.
        unsafe {
            core::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack));
        }
        v
    }
    let mut rng = Rng(99);
    let (c, a, b) = random_half_tiles(&mut rng, Half::Bf16);
    let before = mxcsr();
    let mut t = c;
    dot_bf16(&mut t, &a, &b, 16, 16, 16);
    assert_eq!(mxcsr() & 0xFFC0, before & 0xFFC0);
    assert_eq!(
        before & 0xFFC0,
        0x1F80,
        "test harness runs with the default MXCSR"
    );
}

#[test]
fn flush_threshold_constant() {
    let t = 2f64.powi(-126) - 2f64.powi(-151);
    assert_eq!(scalar::FLUSH_BELOW, t);
}

// ---------------------------------------------------------------------------------------------
// Blocks of products (the fused 2x2 kernel)

/// Random 2x2 blocks (steps 0 to 9, overlapping and spaced steps, every signedness) on the
/// fused AVX-512 kernel against the same products one instruction at a time on the portable
/// kernel.
#[test]
fn block_int8_fused_matches_instruction_sequence() {
    if let Some(why) = Kernel::Avx512.int8_missing() {
        report_skipped(Kernel::Avx512, why);
        return;
    }
    let mut rng = Rng(0x0B10_C2B2);
    let byte = |r: &mut Rng| match r.below(3) {
        0 => [0x00, 0x7F, 0x80, 0xFF][r.below(4) as usize],
        _ => r.u32() as u8,
    };
    for iter in 0..300 {
        let steps = rng.below(10) as usize;
        let a_step = [2048, 64, 4096 + 64, 0][rng.below(4) as usize];
        let b_step = [2048, 1024, 2048 + 192][rng.below(3) as usize];
        let a: Vec<u8> = (0..steps.max(1) * a_step + 2048)
            .map(|_| byte(&mut rng))
            .collect();
        let b: Vec<u8> = (0..steps.max(1) * b_step + 2048)
            .map(|_| byte(&mut rng))
            .collect();
        let mut c = [[0u8; 1024]; 4];
        for t in c.iter_mut() {
            *t = tile_of(|_, _| [0x7FFF_FF00, 0x8000_0100, rng.u32()][rng.below(3) as usize]);
        }
        let signs = (iter & 1 != 0, iter & 2 != 0);
        let mut want = c;
        for s in 0..steps {
            for (i, w) in want.iter_mut().enumerate() {
                let at: &Tile = a[s * a_step + (i / 2) * 1024..][..1024].try_into().unwrap();
                let bt: &Tile = b[s * b_step + (i % 2) * 1024..][..1024].try_into().unwrap();
                scalar::dot_int8_portable(w, at, bt, (16, 16, 16), signs.0, signs.1);
            }
        }
        let mut got = c;
        // SAFETY: AVX-512F and VNNI are present (checked above); every step's 2048 bytes lie
        // in `a` and `b` (their lengths cover steps * step + 2048).
        unsafe {
            avx512::dot_2x2_int8(
                &mut got,
                (a.as_ptr(), a_step),
                (b.as_ptr(), b_step),
                steps,
                signs,
            )
        };
        for t in 0..4 {
            let ctx = |_: usize, _: usize| {
                format!("tile {t}, steps {steps}, steps {a_step}/{b_step}, signedness {signs:?}")
            };
            assert_same("fused int8 block", &got[t], &want[t], &ctx);
        }
    }
}

/// Random 2x2 blocks (steps 0 to 9, overlapping and spaced steps, every signedness, and
/// TDPBSSD with A given biased) on the AVX2 block kernel against the same products one
/// instruction at a time on the portable kernel.
#[test]
fn block_int8_avx2_matches_instruction_sequence() {
    if let Some(why) = Kernel::Avx2.int8_missing() {
        report_skipped(Kernel::Avx2, why);
        return;
    }
    let mut rng = Rng(0x0A72_B10C);
    let byte = |r: &mut Rng| match r.below(3) {
        0 => [0x00, 0x7F, 0x80, 0xFF][r.below(4) as usize],
        _ => r.u32() as u8,
    };
    for iter in 0..300 {
        let steps = rng.below(10) as usize;
        let a_step = [2048, 64, 4096 + 64, 0][rng.below(4) as usize];
        let b_step = [2048, 1024, 2048 + 192][rng.below(3) as usize];
        let a: Vec<u8> = (0..steps.max(1) * a_step + 2048)
            .map(|_| byte(&mut rng))
            .collect();
        let b: Vec<u8> = (0..steps.max(1) * b_step + 2048)
            .map(|_| byte(&mut rng))
            .collect();
        let mut c = [[0u8; 1024]; 4];
        for t in c.iter_mut() {
            *t = tile_of(|_, _| [0x7FFF_FF00, 0x8000_0100, rng.u32()][rng.below(3) as usize]);
        }
        let biased = iter % 5 == 4;
        let signs = if biased {
            (true, true)
        } else {
            (iter & 1 != 0, iter & 2 != 0)
        };
        let mut want = c;
        for s in 0..steps {
            for (i, w) in want.iter_mut().enumerate() {
                let at: &Tile = a[s * a_step + (i / 2) * 1024..][..1024].try_into().unwrap();
                let bt: &Tile = b[s * b_step + (i % 2) * 1024..][..1024].try_into().unwrap();
                scalar::dot_int8_portable(w, at, bt, (16, 16, 16), signs.0, signs.1);
            }
        }
        let a_in: Vec<u8> = if biased {
            a.iter().map(|v| v ^ 0x80).collect()
        } else {
            a.clone()
        };
        let mut got = c;
        // SAFETY: AVX2 is present (checked above); every step's 2048 bytes lie in `a_in` and
        // `b` (their lengths cover steps * step + 2048).
        unsafe {
            avx2::dot_2x2_int8(
                &mut got,
                (a_in.as_ptr(), a_step),
                (b.as_ptr(), b_step),
                steps,
                signs,
                biased,
            )
        };
        for t in 0..4 {
            let ctx = |_: usize, _: usize| {
                format!(
                    "tile {t}, steps {steps}, steps {a_step}/{b_step}, signedness {signs:?}, \
                     biased {biased}"
                )
            };
            assert_same("AVX2 int8 block", &got[t], &want[t], &ctx);
        }
        // The same block with A's or B's tiles (or both) extended ahead, as a GEMM prepares
        // them (A not biased), where they lie at whole tiles of their buffers: the same C.
        if biased || !a_step.is_multiple_of(1024) || !b_step.is_multiple_of(1024) {
            continue;
        }
        let extended = |x: &[u8], signed: bool, split: bool| -> Vec<Widened> {
            x.chunks_exact(1024)
                .map(|t| {
                    let mut w = Widened::ZERO;
                    let t: &Tile = t.try_into().unwrap();
                    if split {
                        // SAFETY: AVX2 is present (checked above).
                        unsafe { avx2::extend_split(t, signed, &mut w) };
                    } else {
                        // SAFETY: as above.
                        unsafe { avx2::extend(t, signed, &mut w) };
                    }
                    w
                })
                .collect()
        };
        let (a_tiles, b_tiles) = (extended(&a, signs.0, false), extended(&b, signs.1, true));
        let pa = super::block::PreparedTiles {
            tiles: &a_tiles,
            first: 0,
            stride: a_step / 1024,
        };
        let pb = super::block::PreparedTiles {
            tiles: &b_tiles,
            stride: b_step / 1024,
            ..pa
        };
        for (which, prepared) in [
            ("A", (Some(pa), None)),
            ("B", (None, Some(pb))),
            ("both", (Some(pa), Some(pb))),
        ] {
            let mut again = c;
            // SAFETY: as above; the prepared tiles are A's and B's own, extended with their
            // signedness.
            unsafe {
                avx2::dot_2x2_int8_prepared(
                    &mut again,
                    (a.as_ptr(), a_step),
                    (b.as_ptr(), b_step),
                    prepared,
                    steps,
                    signs,
                )
            };
            for t in 0..4 {
                let ctx = |_: usize, _: usize| {
                    format!("prepared {which}, tile {t}, steps {steps}, signedness {signs:?}")
                };
                assert_same("AVX2 int8 block, prepared", &again[t], &want[t], &ctx);
            }
        }
    }
}

/// Random 2x2 blocks of floating-point products (special-heavy elements, both formats) on the
/// AVX-512 and AVX2 block kernels against the exact model applied instruction by instruction,
/// and the block's top row on the AVX-512 row kernel against [`avx512::dot_half`] product by
/// product and against the exact model.
#[test]
fn block_half_fused_matches_exact_sequence() {
    let avx512 = Kernel::Avx512.float_missing().is_none();
    for kernel in [Kernel::Avx512, Kernel::Avx2] {
        if let Some(why) = kernel.float_missing() {
            report_skipped(kernel, why);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if avx512 && !avx512::pairs_available() {
        report_skipped(
            Kernel::Avx512,
            "its bf16 loop on VDPBF16PS: the CPU lacks AVX512_BF16 or fails its check",
        );
    }
    let mut rng = Rng(0x00B1_0CF1);
    for iter in 0..120 {
        let half = if iter % 3 == 2 {
            Half::Fp16
        } else {
            Half::Bf16
        };
        let steps = 1 + rng.below(9) as usize;
        let (a_step, b_step) = ([2048, 1024][rng.below(2) as usize], 2048 + 64);
        let mut a = vec![0u8; steps * a_step + 2048];
        let mut b = vec![0u8; steps * b_step + 2048];
        // Half of the cases without NaNs and infinities, where no lane needs the exact model
        // (which would hide a fault of the vector kernel): moderate magnitudes, or tiny ones
        // (denormal operands and C, products below 2^-126) for DAZ and FTZ.
        let special = iter % 2 == 0;
        let tiny = iter % 4 == 3;
        // Some of the moderate cases with infinities and no NaN: positive A with a +Inf here
        // and there, positive nonzero B and C, so that lanes reach +Inf and stay there.
        let infinite = iter % 8 == 1;
        let inf = match half {
            Half::Bf16 => 0x7F80,
            Half::Fp16 => 0x7C00,
        };
        let tiny_half = |rng: &mut Rng| -> u16 {
            let r = rng.u32();
            match half {
                Half::Bf16 => {
                    let exp = [0u16, 1, 2, 0x3F, 0x40, 0x7F][r as usize % 6];
                    (r >> 16) as u16 & 0x807F | exp << 7
                }
                Half::Fp16 => {
                    let exp = [0u16, 1, 15][r as usize % 3];
                    (r >> 16) as u16 & 0x83FF | exp << 10
                }
            }
        };
        let a_len = a.len();
        for (i, x) in a
            .chunks_exact_mut(2)
            .chain(b.chunks_exact_mut(2))
            .enumerate()
        {
            let v = if special {
                half_special(&mut rng, half)
            } else if tiny {
                tiny_half(&mut rng)
            } else if infinite {
                match rng.below(16) {
                    0 if 2 * i < a_len => inf,
                    _ => (rng.u32() as u16 & 0x03FF) | 0x3800,
                }
            } else {
                // Moderate magnitudes of either sign: exponent bits 0b0_11xx_xxxx.
                (rng.u32() as u16 & 0x83FF) | 0x3800
            };
            x.copy_from_slice(&v.to_le_bytes());
        }
        let mut c = [[0u8; 1024]; 4];
        for t in c.iter_mut() {
            *t = if special {
                random_half_tiles(&mut rng, half).0
            } else if tiny {
                tile_of(|_, _| {
                    let r = rng.u32();
                    (r & 0x807F_FFFF) | [0u32, 1, 2, 127][(r >> 8) as usize % 4] << 23
                })
            } else if infinite {
                tile_of(|_, _| 0x3F80_0000 ^ (rng.u32() & 0x007F_FFFF))
            } else {
                tile_of(|_, _| 0x3F80_0000 ^ (rng.u32() & 0x807F_FFFF))
            };
        }
        let mut want = c;
        for s in 0..steps {
            for (i, w) in want.iter_mut().enumerate() {
                let at: &Tile = a[s * a_step + (i / 2) * 1024..][..1024].try_into().unwrap();
                let bt: &Tile = b[s * b_step + (i % 2) * 1024..][..1024].try_into().unwrap();
                *w = oracle_half(w, at, bt, 16, 16, 16, half);
            }
        }
        if avx512 {
            let mut got = c;
            // SAFETY: AVX-512F is present and passed the DAZ/FTZ self-check (checked above).
            unsafe { avx512::dot_2x2_half(&mut got, (&a, a_step), (&b, b_step), steps, half) };
            for t in 0..4 {
                let ctx = |_: usize, _: usize| format!("tile {t}, steps {steps}, {half:?}");
                assert_same("fused half block", &got[t], &want[t], &ctx);
            }
            // The top row of the block (A's tile 0 of each step, C00 and C01) on the row
            // kernel, against the per-instruction kernel and the exact model.
            let mut each = [c[0], c[1]];
            for s in 0..steps {
                for (w, ct) in each.iter_mut().enumerate() {
                    let at: &Tile = a[s * a_step..][..1024].try_into().unwrap();
                    let bt: &Tile = b[s * b_step + w * 1024..][..1024].try_into().unwrap();
                    // SAFETY: as above.
                    unsafe { avx512::dot_half(ct, at, bt, 16, 16, 16, half) };
                }
            }
            let mut row = [c[0], c[1]];
            // SAFETY: as above.
            unsafe { avx512::dot_1x2_half(&mut row, (&a, a_step), (&b, b_step), steps, half) };
            for w in 0..2 {
                let ctx = |_: usize, _: usize| format!("row tile {w}, steps {steps}, {half:?}");
                assert_same("AVX-512 row vs dot_half", &row[w], &each[w], &ctx);
                assert_same("AVX-512 row vs exact", &row[w], &want[w], &ctx);
            }
            // NaN-free operands take the fused path, never the product-by-product one, so the
            // comparison above checked the fused kernel.
            if !special {
                let mut fused = [c[0], c[1]];
                // SAFETY: as above.
                let done = unsafe {
                    match half {
                        Half::Bf16 => avx512::row_fast::<false>(
                            &mut fused,
                            (&a, a_step),
                            (&b, b_step),
                            steps,
                            bf16_pairs(),
                        ),
                        Half::Fp16 => avx512::row_fast::<true>(
                            &mut fused,
                            (&a, a_step),
                            (&b, b_step),
                            steps,
                            false,
                        ),
                    }
                };
                assert!(
                    done,
                    "the AVX-512 row kernel declined a NaN-free case, {half:?}"
                );
                assert!(fused == row, "the fused row differs, {half:?}");
            }
            // Both bf16 k-loops, on FMAs and (where the CPU passed its check) on VDPBF16PS,
            // whichever the dispatch picked above, for the block and for its top row: the
            // exact result, or a refusal with C untouched where a lane ends in a NaN.
            if half == Half::Bf16 {
                let loops: &[bool] = if avx512::pairs_available() {
                    &[false, true]
                } else {
                    &[false]
                };
                for &pairs in loops {
                    let mut block = c;
                    let mut row = [c[0], c[1]];
                    // SAFETY: as above; `pairs` only where pairs_available().
                    let (block_done, row_done) = unsafe {
                        (
                            avx512::half_block_fast::<false>(
                                &mut block,
                                (&a, a_step),
                                (&b, b_step),
                                steps,
                                pairs,
                            ),
                            avx512::row_fast::<false>(
                                &mut row,
                                (&a, a_step),
                                (&b, b_step),
                                steps,
                                pairs,
                            ),
                        )
                    };
                    let what = if pairs { "VDPBF16PS" } else { "FMA" };
                    assert!(special || (block_done && row_done), "{what} loop declined");
                    let block_want = if block_done { want } else { c };
                    assert!(block == block_want, "{what} block, steps {steps}");
                    if row_done {
                        assert!(row == [want[0], want[1]], "{what} row, steps {steps}");
                    } else {
                        assert!(row == [c[0], c[1]], "{what} row declined but wrote C");
                    }
                }
            }
        }
        check_avx2_half_block(&c, (&a, a_step), (&b, b_step), steps, half, &want, !special);
    }
}

/// The AVX2 float block on one case: the sequence's result, or (only where a lane ends in a
/// NaN, never when `nan_free`) a refusal with C untouched. Skipped where the CPU lacks the
/// kernel.
fn check_avx2_half_block(
    c: &[Tile; 4],
    a: (&[u8], usize),
    b: (&[u8], usize),
    steps: usize,
    half: Half,
    want: &[Tile; 4],
    nan_free: bool,
) {
    if Kernel::Avx2.float_missing().is_some() {
        return;
    }
    let mut got = *c;
    // SAFETY: AVX2, FMA and F16C are present and passed the DAZ/FTZ self-check (checked
    // above).
    let done = unsafe { avx2::dot_2x2_half(&mut got, a, b, steps, half) };
    assert!(done || !nan_free, "the AVX2 block refused a NaN-free case");
    let want = if done { want } else { c };
    for t in 0..4 {
        let ctx = |_: usize, _: usize| format!("AVX2, tile {t}, steps {steps}, {half:?}");
        assert_same("AVX2 half block", &got[t], &want[t], &ctx);
    }
    // The same block with A's tiles widened ahead (a GEMM's prepared A), where A's tiles lie
    // at whole tiles of its buffer: the same result, or the same refusal.
    if a.1.is_multiple_of(1024) {
        let mut tiles = vec![Widened::ZERO; a.0.len() / 1024];
        for (tile, w) in a.0.chunks_exact(1024).zip(tiles.iter_mut()) {
            // SAFETY: as above (AVX2 and F16C present).
            unsafe { avx2::widen(tile.try_into().unwrap(), half, w) };
        }
        let prepared = super::block::PreparedTiles {
            tiles: &tiles,
            first: 0,
            stride: a.1 / 1024,
        };
        let mut again = *c;
        // SAFETY: as above.
        let done_again = unsafe {
            avx2::dot_2x2_half_prepared(&mut again, a, b, (Some(prepared), None), steps, half)
        };
        assert_eq!(done_again, done, "prepared A: a different refusal");
        for t in 0..4 {
            let ctx = |_: usize, _: usize| format!("AVX2 prepared, tile {t}, {half:?}");
            assert_same("AVX2 half block, prepared A", &again[t], &got[t], &ctx);
        }
        // Without the last step's second tile the block is declined, C untouched.
        let last = (steps - 1) * (a.1 / 1024) + 1;
        let short = super::block::PreparedTiles {
            tiles: &tiles[..last],
            ..prepared
        };
        let mut declined = *c;
        // SAFETY: as above.
        let done_short = unsafe {
            avx2::dot_2x2_half_prepared(&mut declined, a, b, (Some(short), None), steps, half)
        };
        assert!(!done_short, "a missing prepared tile was not noticed");
        assert!(declined == *c, "a declined block changed C");
        // B's tiles widened ahead too (a GEMM's prepared panel of B), alone and with A's.
        if b.1.is_multiple_of(1024) && b.1 > 0 {
            let mut b_tiles = vec![Widened::ZERO; b.0.len() / 1024];
            for (tile, w) in b.0.chunks_exact(1024).zip(b_tiles.iter_mut()) {
                // SAFETY: as above.
                unsafe { avx2::widen(tile.try_into().unwrap(), half, w) };
            }
            let prepared_b = super::block::PreparedTiles {
                tiles: &b_tiles,
                first: 0,
                stride: b.1 / 1024,
            };
            for (which, both) in [
                ("prepared B", (None, Some(prepared_b))),
                ("both", (Some(prepared), Some(prepared_b))),
            ] {
                let mut again = *c;
                // SAFETY: as above.
                let done_again =
                    unsafe { avx2::dot_2x2_half_prepared(&mut again, a, b, both, steps, half) };
                assert_eq!(done_again, done, "{which}: a different refusal");
                for t in 0..4 {
                    let ctx = |_: usize, _: usize| format!("AVX2 {which}, tile {t}, {half:?}");
                    assert_same("AVX2 half block, prepared", &again[t], &got[t], &ctx);
                }
            }
        }
    }
}
