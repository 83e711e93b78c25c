//! The raw layer: one `unsafe fn` per AMX instruction, each a single inline-asm statement, plus
//! the dispatchers from run-time tile numbers to them and the XSAVE used to read whole tiles.
//!
//! Everything that executes a tile instruction goes through this file: the safe
//! [`Hardware`](super::Hardware) backend after its checks, and the public
//! [`intrinsics`](crate::intrinsics) directly.
//!
//! # Encodings
//!
//! Tile registers are not asm operands, so each tile number is a `const` generic spliced into
//! the template as a `const` operand (`tmm{t}`). The assembler (LLVM, Intel syntax) then emits
//! these forms
//! ([semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md)
//! sections 2-8); `tests/hardware_encoding.rs` and the unit tests below
//! read the emitted bytes back and compare:
//!
//! | Function          | Form                                       | Bytes (tmm0.., base in `rdi`)  |
//! |-------------------|--------------------------------------------|--------------------------------|
//! | [`ldtilecfg`]     | VEX.128.NP.0F38.W0 49 !(11):000:bbb        | `C4 E2 78 49 07` (`[rdi]`)     |
//! | [`sttilecfg`]     | VEX.128.66.0F38.W0 49 !(11):000:bbb        | `C4 E2 79 49 07`               |
//! | [`tilerelease`]   | VEX.128.NP.0F38.W0 49 C0                   | `C4 E2 78 49 C0`               |
//! | [`tilezero`]      | VEX.128.F2.0F38.W0 49 11:rrr:000           | `C4 E2 7B 49 C0+8t`            |
//! | [`tileloadd`]     | VEX.128.F2.0F38.W0 4B !(11):rrr:100 + SIB  | `C4 E2 7B 4B 04+8t 37` (`[rdi+rsi*1]`) |
//! | [`tileloaddt1`]   | VEX.128.66.0F38.W0 4B !(11):rrr:100 + SIB  | `C4 E2 79 4B ..`               |
//! | [`tilestored`]    | VEX.128.F3.0F38.W0 4B !(11):rrr:100 + SIB  | `C4 E2 7A 4B ..`               |
//! | [`tdpbssd`]       | VEX.128.F2.0F38.W0 5E 11:rrr:bbb, vvvv = B | `C4 E2 (~B<<3)\|3 5E C0+8C+A`   |
//! | [`tdpbsud`]       | VEX.128.F3.0F38.W0 5E                      | pp = 2                         |
//! | [`tdpbusd`]       | VEX.128.66.0F38.W0 5E                      | pp = 1                         |
//! | [`tdpbuud`]       | VEX.128.NP.0F38.W0 5E                      | pp = 0                         |
//! | [`tdpbf16ps`]     | VEX.128.F3.0F38.W0 5C                      | pp = 2                         |
//! | [`tdpfp16ps`]     | VEX.128.F2.0F38.W0 5C                      | pp = 3                         |
//! | [`tileloaddrs`]   | VEX.128.F2.0F38.W0 4A !(11):rrr:100 + SIB  | `C4 E2 7B 4A ..`               |
//! | [`tileloaddrst1`] | VEX.128.66.0F38.W0 4A !(11):rrr:100 + SIB  | `C4 E2 79 4A ..`               |
//! | [`tdpbf8ps`]      | VEX.128.NP.MAP5.W0 FD 11:rrr:bbb           | `C4 E5 (~B<<3)\|0 FD C0+8C+A`   |
//! | [`tdpbhf8ps`]     | VEX.128.F2.MAP5.W0 FD                      | pp = 3                         |
//! | [`tdphbf8ps`]     | VEX.128.F3.MAP5.W0 FD                      | pp = 2                         |
//! | [`tdphf8ps`]      | VEX.128.66.MAP5.W0 FD                      | pp = 1                         |
//! | [`tcmmimfp16ps`]  | VEX.128.66.0F38.W0 6C                      | `C4 E2 (~B<<3)\|1 6C C0+8C+A`   |
//! | [`tcmmrlfp16ps`]  | VEX.128.NP.0F38.W0 6C                      | pp = 0                         |
//! | [`tilemovrow`]    | EVEX.512.66.0F38.W0 4A /r, row in ECX      | `62 E2 75 48 4A F0+T` (zmm22)  |
//! | [`tcvtrowd2ps`]   | EVEX.512.F3.0F38.W0 4A                     | `62 E2 76 48 4A F0+T`          |
//! | [`tcvtrowps2bf16h`] | EVEX.512.F2.0F38.W0 6D                   | `62 E2 77 48 6D F0+T`          |
//! | [`tcvtrowps2bf16l`] | EVEX.512.F3.0F38.W0 6D                   | `62 E2 76 48 6D F0+T`          |
//! | [`tcvtrowps2phh`] | EVEX.512.NP.0F38.W0 6D                     | `62 E2 74 48 6D F0+T`          |
//! | [`tcvtrowps2phl`] | EVEX.512.66.0F38.W0 6D                     | `62 E2 75 48 6D F0+T`          |
//!
//! The AMX-AVX512 row moves always write zmm22 and take the row in ECX (their immediate forms,
//! for the intrinsics, are EVEX map 0F3A: `62 E3 .. 48 07`/`77` with the row as imm8), so their
//! bytes are exactly those of LLVM's MC tests for those registers.
//!
//! The memory forms take whatever registers the compiler allocates (a base or index in r8-r15
//! clears VEX.B or VEX.X); the stride is always the SIB index with scale 1.
//!
//! # Options
//!
//! No asm statement here is `pure`, so the compiler never drops or merges one. Statements that
//! read memory are `readonly`, statements that write memory have no memory option, and only
//! statements that touch no memory at all are `nomem` (docs/architecture.md, section 7: a
//! configuration on the stack that the compiler thinks is dead must not be optimised away before
//! LDTILECFG reads it; the pointer is an input operand and the asm is not `nomem`). rustc lowers a non-pure `nomem`
//! statement to `memory(inaccessiblemem: readwrite)` and a non-pure `readonly` one to
//! `memory(read, inaccessiblemem: readwrite)`, so the tile instructions stay in program order
//! with respect to each other. None of these instructions touches RFLAGS or the stack.
//!
//! # Safety, in general
//!
//! Every function here executes an AMX instruction, which the caller must make legal: the CPU
//! implements it, the OS enabled the AMX state components in XCR0 and, for the instructions that
//! touch tile data (all but LDTILECFG, STTILECFG and TILERELEASE), this process holds the Linux
//! XTILEDATA permission (otherwise SIGILL). Each function states the rest of its precondition:
//! meeting it means the instruction raises no exception.

// Off x86-64 the asm statements become panics (see `asm!` below) and their operands go unused.
#![cfg_attr(
    not(target_arch = "x86_64"),
    allow(unused_unsafe, unused_variables, dead_code)
)]

#[cfg(target_arch = "x86_64")]
use core::arch::asm;

/// Off x86-64 no AMX instruction exists, and none can be reached: `Hardware::new()` fails there
/// and the public intrinsics are not compiled. The functions keep their signatures so the crate
/// (and its emulator) builds everywhere; their bodies panic.
#[cfg(not(target_arch = "x86_64"))]
macro_rules! asm {
    ($($tokens:tt)*) => {
        unreachable!("AMX instructions exist only on x86-64")
    };
}

use amx_tilecfg::DotKind;

use super::numerics::row::RowOp;
use super::Product;

/// LDTILECFG m512: loads the 64-byte tile configuration at `ptr` and zeroes all tile data.
///
/// # Safety
/// AMX-TILE is implemented and enabled in XCR0 (the permission is not needed, L7). The 64 bytes
/// at `ptr` are readable (no alignment needed, L6) and form an image LDTILECFG accepts on this
/// CPU's palette table (`check::ldtilecfg`), or have palette 0; otherwise #GP. Code that keeps a
/// tracked copy of the configuration must update it.
#[inline(always)]
pub(crate) unsafe fn ldtilecfg(ptr: *const u8) {
    // SAFETY: the caller guarantees the image is readable and accepted; the asm only reads it.
    unsafe {
        asm!(
            "ldtilecfg [{ptr}]",
            ptr = in(reg) ptr,
            options(readonly, nostack, preserves_flags),
        );
    }
}

/// STTILECFG m512: writes the loaded configuration (64 zero bytes when unconfigured) to `ptr`.
///
/// # Safety
/// AMX-TILE is implemented and enabled in XCR0. The 64 bytes at `ptr` are writable and not
/// aliased by a live reference (no alignment needed, S4).
#[inline(always)]
pub(crate) unsafe fn sttilecfg(ptr: *mut u8) {
    // SAFETY: the caller guarantees the 64 bytes are writable and unaliased.
    unsafe {
        asm!(
            "sttilecfg [{ptr}]",
            ptr = in(reg) ptr,
            options(nostack, preserves_flags),
        );
    }
}

/// TILERELEASE: zeroes all tile data and returns to the unconfigured (INIT) state.
///
/// # Safety
/// AMX-TILE is implemented and enabled in XCR0 (legal configured or not, R2). Code that keeps a
/// tracked copy of the configuration must update it.
#[inline(always)]
pub(crate) unsafe fn tilerelease() {
    // SAFETY: the caller guarantees AMX-TILE is usable; the instruction touches no memory.
    unsafe { asm!("tilerelease", options(nomem, nostack, preserves_flags)) }
}

/// TILEZERO tmm`T`: zeroes all 1024 bytes of tile `T` and clears start_row.
///
/// # Safety
/// AMX-TILE is usable and permitted on this thread; a configuration is loaded and tile `T` is
/// used in it (rows and colsb nonzero), as `check::tilezero` verifies; otherwise #UD.
#[inline(always)]
pub(crate) unsafe fn tilezero<const T: i32>() {
    const { assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only") };
    // SAFETY: the caller guarantees the tile state makes the instruction legal; no memory.
    unsafe {
        asm!(
            "tilezero tmm{t}",
            t = const T,
            options(nomem, nostack, preserves_flags),
        );
    }
}

/// TILELOADD tmm`T`, `[base + stride*1]`: loads rows `start_row..rows` of tile `T`, row `r` from
/// the `colsb` bytes at `base + r * stride` (64-bit wrapping address arithmetic), zeroing the
/// rest of each loaded row and the rows past `rows`; clears start_row.
///
/// # Safety
/// AMX-TILE is usable and permitted on this thread; a configuration is loaded in which tile `T`
/// is used, its colsb is a multiple of 4 and start_row is below its rows, as
/// `check::tile_memory` verifies (otherwise #UD). For every row `r` in `start_row..rows`, the
/// `colsb` bytes at `base.wrapping_offset(r * stride)` are readable (no alignment needed).
#[inline(always)]
pub(crate) unsafe fn tileloadd<const T: i32>(base: *const u8, stride: isize) {
    const { assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only") };
    // SAFETY: the caller guarantees the tile state and that every row read is readable.
    unsafe {
        asm!(
            "tileloadd tmm{t}, [{base} + {stride}*1]",
            t = const T,
            base = in(reg) base,
            stride = in(reg) stride,
            options(readonly, nostack, preserves_flags),
        );
    }
}

/// TILELOADDT1 tmm`T`, `[base + stride*1]`: [`tileloadd`] with a hint that the data will not
/// be reused (the same architectural result, T3).
///
/// # Safety
/// As for [`tileloadd`].
#[inline(always)]
pub(crate) unsafe fn tileloaddt1<const T: i32>(base: *const u8, stride: isize) {
    const { assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only") };
    // SAFETY: the caller guarantees the tile state and that every row read is readable.
    unsafe {
        asm!(
            "tileloaddt1 tmm{t}, [{base} + {stride}*1]",
            t = const T,
            base = in(reg) base,
            stride = in(reg) stride,
            options(readonly, nostack, preserves_flags),
        );
    }
}

/// TILELOADDRS tmm`T`, `[base + stride*1]` (AMX-MOVRS): [`tileloadd`] with a hint that
/// other cores read the data too (the same architectural result).
///
/// # Safety
/// As for [`tileloadd`], and the CPU implements AMX-MOVRS.
#[inline(always)]
pub(crate) unsafe fn tileloaddrs<const T: i32>(base: *const u8, stride: isize) {
    const { assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only") };
    // SAFETY: the caller guarantees the feature, the tile state and that every row is readable.
    unsafe {
        asm!(
            "tileloaddrs tmm{t}, [{base} + {stride}*1]",
            t = const T,
            base = in(reg) base,
            stride = in(reg) stride,
            options(readonly, nostack, preserves_flags),
        );
    }
}

/// TILELOADDRST1 tmm`T`, `[base + stride*1]` (AMX-MOVRS): [`tileloaddt1`] with the hint of
/// [`tileloaddrs`].
///
/// # Safety
/// As for [`tileloaddrs`].
#[inline(always)]
pub(crate) unsafe fn tileloaddrst1<const T: i32>(base: *const u8, stride: isize) {
    const { assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only") };
    // SAFETY: the caller guarantees the feature, the tile state and that every row is readable.
    unsafe {
        asm!(
            "tileloaddrst1 tmm{t}, [{base} + {stride}*1]",
            t = const T,
            base = in(reg) base,
            stride = in(reg) stride,
            options(readonly, nostack, preserves_flags),
        );
    }
}

/// TILESTORED `[base + stride*1]`, tmm`T`: writes the `colsb` bytes of each row `r` in
/// `start_row..rows` of tile `T` to `base + r * stride`, and nothing else; clears start_row.
///
/// # Safety
/// As for [`tileloadd`] (same #UD conditions), and for every row `r` in `start_row..rows` the
/// `colsb` bytes at `base.wrapping_offset(r * stride)` are writable and not aliased by a live
/// reference.
#[inline(always)]
pub(crate) unsafe fn tilestored<const T: i32>(base: *mut u8, stride: isize) {
    const { assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only") };
    // SAFETY: the caller guarantees the tile state and that every row written is writable.
    unsafe {
        asm!(
            "tilestored [{base} + {stride}*1], tmm{t}",
            t = const T,
            base = in(reg) base,
            stride = in(reg) stride,
            options(nostack, preserves_flags),
        );
    }
}

/// Defines one dot-product function: `$mnemonic tmm{C}, tmm{A}, tmm{B}` (ModRM.reg = C,
/// ModRM.rm = A, VEX.vvvv = B).
macro_rules! dot_product {
    ($(#[$doc:meta])* $name:ident, $mnemonic:literal, $feature:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        #[doc = concat!(
            "The CPU implements ", $feature, " and AMX is usable and permitted on this thread; ",
            "a configuration is loaded in which tiles `C`, `A` and `B` are distinct and used, ",
            "every colsb is a multiple of 4, `C.rows == A.rows`, `C.colsb == B.colsb`, ",
            "`A.colsb / 4 == B.rows`, and the TMUL limits hold, as `check::dot` verifies; ",
            "otherwise #UD."
        )]
        #[inline(always)]
        pub(crate) unsafe fn $name<const C: i32, const A: i32, const B: i32>() {
            const {
                assert!(
                    0 <= C && C < 8 && 0 <= A && A < 8 && 0 <= B && B < 8,
                    "AMX has tile registers tmm0 to tmm7 only"
                )
            };
            // SAFETY: the caller guarantees the tile state makes the instruction legal; the
            // instruction reads and writes tile registers only.
            unsafe {
                asm!(
                    concat!($mnemonic, " tmm{c}, tmm{a}, tmm{b}"),
                    c = const C,
                    a = const A,
                    b = const B,
                    options(nomem, nostack, preserves_flags),
                );
            }
        }
    };
}

dot_product!(
    /// TDPBSSD tmm`C`, tmm`A`, tmm`B`: `C += A x B`, signed x signed bytes into i32.
    tdpbssd, "tdpbssd", "AMX-INT8"
);
dot_product!(
    /// TDPBSUD tmm`C`, tmm`A`, tmm`B`: signed bytes (A) x unsigned bytes (B) into i32.
    tdpbsud, "tdpbsud", "AMX-INT8"
);
dot_product!(
    /// TDPBUSD tmm`C`, tmm`A`, tmm`B`: unsigned bytes (A) x signed bytes (B) into i32.
    tdpbusd, "tdpbusd", "AMX-INT8"
);
dot_product!(
    /// TDPBUUD tmm`C`, tmm`A`, tmm`B`: unsigned x unsigned bytes into i32.
    tdpbuud, "tdpbuud", "AMX-INT8"
);
dot_product!(
    /// TDPBF16PS tmm`C`, tmm`A`, tmm`B`: bf16 pairs into f32.
    tdpbf16ps, "tdpbf16ps", "AMX-BF16"
);
dot_product!(
    /// TDPFP16PS tmm`C`, tmm`A`, tmm`B`: fp16 pairs into f32.
    tdpfp16ps, "tdpfp16ps", "AMX-FP16 (or is known to execute TDPFP16PS, [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md) F1)"
);

dot_product!(
    /// TDPBF8PS tmm`C`, tmm`A`, tmm`B`: bf8 quadruples into f32.
    tdpbf8ps, "tdpbf8ps", "AMX-FP8"
);
dot_product!(
    /// TDPBHF8PS tmm`C`, tmm`A`, tmm`B`: bf8 (A) x hf8 (B) quadruples into f32.
    tdpbhf8ps, "tdpbhf8ps", "AMX-FP8"
);
dot_product!(
    /// TDPHBF8PS tmm`C`, tmm`A`, tmm`B`: hf8 (A) x bf8 (B) quadruples into f32.
    tdphbf8ps, "tdphbf8ps", "AMX-FP8"
);
dot_product!(
    /// TDPHF8PS tmm`C`, tmm`A`, tmm`B`: hf8 quadruples into f32.
    tdphf8ps, "tdphf8ps", "AMX-FP8"
);
dot_product!(
    /// TCMMIMFP16PS tmm`C`, tmm`A`, tmm`B`: the imaginary part of complex fp16 products.
    tcmmimfp16ps, "tcmmimfp16ps", "AMX-COMPLEX"
);
dot_product!(
    /// TCMMRLFP16PS tmm`C`, tmm`A`, tmm`B`: the real part of complex fp16 products.
    tcmmrlfp16ps, "tcmmrlfp16ps", "AMX-COMPLEX"
);

/// Defines one AMX-AVX512 row move in its two forms: the row in ECX (`$name`) and the row as
/// an immediate (`$imm`, for the intrinsics). Both write zmm22, returned as a vector.
#[cfg(target_arch = "x86_64")]
macro_rules! row_move {
    ($(#[$doc:meta])* $name:ident, $imm:ident, $mnemonic:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The CPU implements AMX-AVX512 and AVX-512F, the OS enabled the AVX-512 state, and AMX
        /// is usable and permitted on this thread; a configuration is loaded in which tile `T`
        /// is used and its colsb is a multiple of 4 (`check::tile_row`); otherwise #UD.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn $name<const T: i32>(row: u32) -> __m512i {
            const { assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only") };
            let v: __m512i;
            // SAFETY: the caller guarantees the features and the tile state; the instruction
            // reads a tile register and writes zmm22.
            unsafe {
                asm!(
                    concat!($mnemonic, " zmm22, tmm{t}, ecx"),
                    t = const T,
                    in("ecx") row,
                    out("zmm22") v,
                    options(nomem, nostack, preserves_flags),
                );
            }
            v
        }

        /// The immediate form of
        #[doc = concat!("[`", stringify!($name), "`]: the row is `R`.")]
        ///
        /// # Safety
        #[doc = concat!("As for [`", stringify!($name), "`].")]
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub(crate) unsafe fn $imm<const T: i32, const R: i32>() -> __m512i {
            const {
                assert!(0 <= T && T < 8, "AMX has tile registers tmm0 to tmm7 only");
                assert!(0 <= R && R < 256, "the row is an 8-bit immediate");
            };
            let v: __m512i;
            // SAFETY: as above.
            unsafe {
                asm!(
                    concat!($mnemonic, " zmm22, tmm{t}, {r}"),
                    t = const T,
                    r = const R,
                    out("zmm22") v,
                    options(nomem, nostack, preserves_flags),
                );
            }
            v
        }
    };
}

#[cfg(target_arch = "x86_64")]
use core::arch::x86_64::__m512i;

#[cfg(target_arch = "x86_64")]
row_move!(
    /// TILEMOVROW zmm22, tmm`T`, ECX: row `row & 0xFFFF` (chunk `row >> 16`) of tile
    /// `T`, dwords past colsb zero.
    tilemovrow, tilemovrowi, "tilemovrow"
);
#[cfg(target_arch = "x86_64")]
row_move!(
    /// TCVTROWD2PS zmm22, tmm`T`, ECX: the row's int32s as fp32s.
    tcvtrowd2ps, tcvtrowd2psi, "tcvtrowd2ps"
);
#[cfg(target_arch = "x86_64")]
row_move!(
    /// TCVTROWPS2BF16H zmm22, tmm`T`, ECX: the row's fp32s as bf16s in the high halves.
    tcvtrowps2bf16h, tcvtrowps2bf16hi, "tcvtrowps2bf16h"
);
#[cfg(target_arch = "x86_64")]
row_move!(
    /// TCVTROWPS2BF16L zmm22, tmm`T`, ECX: the row's fp32s as bf16s in the low halves.
    tcvtrowps2bf16l, tcvtrowps2bf16li, "tcvtrowps2bf16l"
);
#[cfg(target_arch = "x86_64")]
row_move!(
    /// TCVTROWPS2PHH zmm22, tmm`T`, ECX: the row's fp32s as fp16s in the high halves.
    tcvtrowps2phh, tcvtrowps2phhi, "tcvtrowps2phh"
);
#[cfg(target_arch = "x86_64")]
row_move!(
    /// TCVTROWPS2PHL zmm22, tmm`T`, ECX: the row's fp32s as fp16s in the low halves.
    tcvtrowps2phl, tcvtrowps2phli, "tcvtrowps2phl"
);

/// The XSAVE state-component bitmap of XTILEDATA (state component 18).
pub(crate) const XTILEDATA: u64 = 1 << 18;

/// XSAVE `[buf]` of state component 18 (XTILEDATA) only: requested-feature bitmap EDX:EAX =
/// `1 << 18`, standard (non-compacted) format. `xsave`, not `xsave64`: the two differ only in
/// the x87 component, which is not requested.
///
/// XSAVE writes the component's 8 KiB at its standard offset (CPUID.(0xD,18).EBX) and sets
/// XSTATE_BV\[18\] in the header at `buf + 512` when the tile data is not in its INIT state;
/// when that bit is clear, the data area may not have been written and the tiles are all zero.
/// It touches nothing else in the area.
///
/// # Safety
/// CR4.OSXSAVE is set (implied by AMX being enabled). `buf` is 64-byte aligned (otherwise
/// #GP), and the first CPUID.(0xD,0).EBX bytes at `buf` (which cover component 18 when XCR0
/// enables it) are writable and unaliased.
#[inline(always)]
pub(crate) unsafe fn xsave_tiledata(buf: *mut u8) {
    const EAX: u32 = XTILEDATA as u32;
    const EDX: u32 = (XTILEDATA >> 32) as u32;
    // SAFETY: the caller guarantees alignment and a writable area as large as XSAVE writes.
    unsafe {
        asm!(
            "xsave [{buf}]",
            buf = in(reg) buf,
            in("eax") EAX,
            in("edx") EDX,
            options(nostack, preserves_flags),
        );
    }
}

/// Expands to a `match` of the run-time tile number `$t` that calls `$f::<n>($args)` for
/// n in 0..8 and evaluates to `true`, or does nothing and evaluates to `false` for `$t >= 8`.
macro_rules! dispatch_tile {
    ($t:expr, $f:ident($($arg:expr),*)) => {
        match $t {
            0 => { $f::<0>($($arg),*); true }
            1 => { $f::<1>($($arg),*); true }
            2 => { $f::<2>($($arg),*); true }
            3 => { $f::<3>($($arg),*); true }
            4 => { $f::<4>($($arg),*); true }
            5 => { $f::<5>($($arg),*); true }
            6 => { $f::<6>($($arg),*); true }
            7 => { $f::<7>($($arg),*); true }
            _ => false,
        }
    };
}

/// [`tilezero`] for a run-time tile number. Returns `false`, executing nothing, for `t >= 8`.
///
/// # Safety
/// As for [`tilezero`] with `T = t`.
#[inline(always)]
pub(crate) unsafe fn tilezero_dyn(t: u8) -> bool {
    // SAFETY: forwarded; each arm is the instruction on the tile the caller named.
    unsafe { dispatch_tile!(t, tilezero()) }
}

/// [`tileloadd`] for a run-time tile number. Returns `false`, executing nothing, for `t >= 8`.
///
/// # Safety
/// As for [`tileloadd`] with `T = t`.
#[inline(always)]
pub(crate) unsafe fn tileloadd_dyn(t: u8, base: *const u8, stride: isize) -> bool {
    // SAFETY: forwarded; each arm is the instruction on the tile the caller named.
    unsafe { dispatch_tile!(t, tileloadd(base, stride)) }
}

/// [`tileloaddt1`] for a run-time tile number. Returns `false`, executing nothing, for `t >= 8`.
///
/// # Safety
/// As for [`tileloaddt1`] with `T = t`.
#[inline(always)]
pub(crate) unsafe fn tileloaddt1_dyn(t: u8, base: *const u8, stride: isize) -> bool {
    // SAFETY: forwarded; each arm is the instruction on the tile the caller named.
    unsafe { dispatch_tile!(t, tileloaddt1(base, stride)) }
}

/// [`tilestored`] for a run-time tile number. Returns `false`, executing nothing, for `t >= 8`.
///
/// # Safety
/// As for [`tilestored`] with `T = t`.
#[inline(always)]
pub(crate) unsafe fn tilestored_dyn(t: u8, base: *mut u8, stride: isize) -> bool {
    // SAFETY: forwarded; each arm is the instruction on the tile the caller named.
    unsafe { dispatch_tile!(t, tilestored(base, stride)) }
}

/// The dot product `kind` on the fixed tiles `C`, `A`, `B`. Returns `false`, executing nothing,
/// when two of them are the same tile (the silicon would raise #UD).
///
/// # Safety
/// As for the dot-product function of `kind` (e.g. [`tdpbssd`]) with these tiles.
#[inline(always)]
unsafe fn dot_fixed<const C: i32, const A: i32, const B: i32>(kind: DotKind) -> bool {
    if C == A || C == B || A == B {
        return false;
    }
    // SAFETY: forwarded from this function's contract; the tiles are distinct.
    unsafe {
        match kind {
            DotKind::Tdpbssd => tdpbssd::<C, A, B>(),
            DotKind::Tdpbsud => tdpbsud::<C, A, B>(),
            DotKind::Tdpbusd => tdpbusd::<C, A, B>(),
            DotKind::Tdpbuud => tdpbuud::<C, A, B>(),
            DotKind::Tdpbf16ps => tdpbf16ps::<C, A, B>(),
            DotKind::Tdpfp16ps => tdpfp16ps::<C, A, B>(),
        }
    }
    true
}

/// Expands to nested `match`es of the run-time tiles `$c`, `$a`, `$b` over 0..8 each, calling
/// `$f::<c, a, b>($kind)`; evaluates to `false` when a tile is 8 or more.
macro_rules! dispatch_dot {
    ($f:ident, $kind:ident, $c:ident, $a:ident, $b:ident) => {
        dispatch_dot!(@c [$f $kind $c $a $b] [0 1 2 3 4 5 6 7])
    };
    (@c [$f:ident $kind:ident $c:ident $a:ident $b:ident] [$($cv:literal)*]) => {
        match $c {
            $($cv => dispatch_dot!(@a [$f $kind $c $a $b] $cv [0 1 2 3 4 5 6 7]),)*
            _ => false,
        }
    };
    (@a [$f:ident $kind:ident $c:ident $a:ident $b:ident] $cv:literal [$($av:literal)*]) => {
        match $a {
            $($av => dispatch_dot!(@b [$f $kind $c $a $b] $cv $av [0 1 2 3 4 5 6 7]),)*
            _ => false,
        }
    };
    (@b [$f:ident $kind:ident $c:ident $a:ident $b:ident] $cv:literal $av:literal [$($bv:literal)*]) => {
        match $b {
            $($bv => $f::<$cv, $av, $bv>($kind),)*
            _ => false,
        }
    };
}

/// The dot product `kind` on run-time tiles `C = c`, `A = a`, `B = b`. Returns `false`,
/// executing nothing, when a tile number is 8 or more or two of them are equal.
///
/// # Safety
/// As for the dot-product function of `kind` (e.g. [`tdpbssd`]) with `C = c`, `A = a`,
/// `B = b`.
#[inline(always)]
pub(crate) unsafe fn dot_dyn(kind: DotKind, c: u8, a: u8, b: u8) -> bool {
    // SAFETY: forwarded; each arm is the instruction on the tiles the caller named.
    unsafe { dispatch_dot!(dot_fixed, kind, c, a, b) }
}

/// The AMX-FP8 or AMX-COMPLEX dot product `product` on the fixed tiles `C`, `A`, `B`. Returns
/// `false`, executing nothing, when two of them are the same tile.
///
/// # Safety
/// As for the function of `product` (e.g. [`tdpbf8ps`]) with these tiles.
#[inline(always)]
unsafe fn product_fixed<const C: i32, const A: i32, const B: i32>(product: Product) -> bool {
    if C == A || C == B || A == B {
        return false;
    }
    // SAFETY: forwarded from this function's contract; the tiles are distinct.
    unsafe {
        match product {
            Product::Tdpbf8ps => tdpbf8ps::<C, A, B>(),
            Product::Tdpbhf8ps => tdpbhf8ps::<C, A, B>(),
            Product::Tdphbf8ps => tdphbf8ps::<C, A, B>(),
            Product::Tdphf8ps => tdphf8ps::<C, A, B>(),
            Product::Tcmmimfp16ps => tcmmimfp16ps::<C, A, B>(),
            Product::Tcmmrlfp16ps => tcmmrlfp16ps::<C, A, B>(),
        }
    }
    true
}

/// The AMX-FP8 or AMX-COMPLEX dot product `product` on run-time tiles. Returns `false`,
/// executing nothing, when a tile number is 8 or more or two of them are equal.
///
/// # Safety
/// As for the function of `product` (e.g. [`tdpbf8ps`]) with `C = c`, `A = a`, `B = b`.
#[inline(always)]
pub(crate) unsafe fn product_dyn(product: Product, c: u8, a: u8, b: u8) -> bool {
    // SAFETY: forwarded; each arm is the instruction on the tiles the caller named.
    unsafe { dispatch_dot!(product_fixed, product, c, a, b) }
}

/// [`tileloaddrs`] (`t1`: [`tileloaddrst1`]) for a run-time tile number. Returns `false`,
/// executing nothing, for `t >= 8`.
///
/// # Safety
/// As for [`tileloaddrs`] with `T = t`.
#[inline(always)]
pub(crate) unsafe fn tileloaddrs_dyn(t: u8, base: *const u8, stride: isize, t1: bool) -> bool {
    // SAFETY: forwarded; each arm is the instruction on the tile the caller named.
    unsafe {
        if t1 {
            dispatch_tile!(t, tileloaddrst1(base, stride))
        } else {
            dispatch_tile!(t, tileloaddrs(base, stride))
        }
    }
}

/// The AMX-AVX512 row move `op` of row `row` of run-time tile `t`: the 64 bytes it writes
/// into its zmm register, or `None`, executing nothing, for `t >= 8`.
///
/// # Safety
/// As for the function of `op` (e.g. [`tilemovrow`]) with `T = t`.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) unsafe fn row_dyn(op: RowOp, t: u8, row: u32) -> Option<[u8; 64]> {
    macro_rules! on_tile {
        ($f:ident) => {
            match t {
                0 => $f::<0>(row),
                1 => $f::<1>(row),
                2 => $f::<2>(row),
                3 => $f::<3>(row),
                4 => $f::<4>(row),
                5 => $f::<5>(row),
                6 => $f::<6>(row),
                7 => $f::<7>(row),
                _ => return None,
            }
        };
    }
    // SAFETY: forwarded; each arm is the instruction on the tile the caller named.
    let v = unsafe {
        match op {
            RowOp::Move => on_tile!(tilemovrow),
            RowOp::D2ps => on_tile!(tcvtrowd2ps),
            RowOp::Ps2bf16h => on_tile!(tcvtrowps2bf16h),
            RowOp::Ps2bf16l => on_tile!(tcvtrowps2bf16l),
            RowOp::Ps2phh => on_tile!(tcvtrowps2phh),
            RowOp::Ps2phl => on_tile!(tcvtrowps2phl),
        }
    };
    // SAFETY: a 512-bit vector is 64 bytes with no invalid bit pattern either way.
    Some(unsafe { core::mem::transmute::<__m512i, [u8; 64]>(v) })
}

/// No row moves off x86-64 ([`Hardware::new`](super::Hardware::new) fails there first).
///
/// # Safety
/// Never callable: there is no AMX.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn row_dyn(_op: RowOp, _t: u8, _row: u32) -> Option<[u8; 64]> {
    None
}

#[cfg(all(test, target_arch = "x86_64", target_os = "linux"))]
mod tests {
    //! Encoding checks that run on any x86-64 machine: they read the machine code of small
    //! wrapper functions (never executing it) and compare it with
    //! [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md).
    //!
    //! Each wrapper lives in its own linker section named like a C identifier, so the linker
    //! defines `__start_<section>` and `__stop_<section>` and the test reads exactly the
    //! wrapper's bytes.

    use super::*;

    macro_rules! wrapper {
        ($name:ident($($arg:ident: $ty:ty),*) $body:block) => {
            #[unsafe(link_section = concat!("amx_asm_", stringify!($name)))]
            #[inline(never)]
            unsafe extern "C" fn $name($($arg: $ty),*) $body
        };
    }

    /// The machine code of wrapper `$name` (whose address is also kept alive).
    macro_rules! code_of {
        ($name:ident) => {{
            std::hint::black_box($name as *const ());
            unsafe extern "C" {
                #[link_name = concat!("__start_amx_asm_", stringify!($name))]
                static START: u8;
                #[link_name = concat!("__stop_amx_asm_", stringify!($name))]
                static STOP: u8;
            }
            let (start, stop) = (&raw const START, &raw const STOP);
            // SAFETY: the linker defines START and STOP as the bounds of the section that holds
            // only this wrapper's code, which is mapped readable for the life of the process;
            // the bytes are read, never executed.
            unsafe { std::slice::from_raw_parts(start, stop as usize - start as usize) }
        }};
    }

    wrapper!(zero_dyn(t: u8) {
        // SAFETY: never called; only its code bytes are read.
        unsafe {
            tilezero_dyn(t);
        }
    });
    wrapper!(load_dyn(t: u8, p: *const u8, s: isize) {
        // SAFETY: never called; only its code bytes are read.
        unsafe {
            tileloadd_dyn(t, p, s);
        }
    });
    wrapper!(load_t1_dyn(t: u8, p: *const u8, s: isize) {
        // SAFETY: never called; only its code bytes are read.
        unsafe {
            tileloaddt1_dyn(t, p, s);
        }
    });
    wrapper!(store_dyn(t: u8, p: *mut u8, s: isize) {
        // SAFETY: never called; only its code bytes are read.
        unsafe {
            tilestored_dyn(t, p, s);
        }
    });
    wrapper!(save_tiledata(p: *mut u8) {
        // SAFETY: never called; only its code bytes are read.
        unsafe { xsave_tiledata(p) }
    });

    macro_rules! dot_wrappers {
        ($($name:ident => $kind:ident),*) => {$(
            wrapper!($name(c: u8, a: u8, b: u8) {
                // SAFETY: never called; only its code bytes are read.
                unsafe {
                    dot_dyn(DotKind::$kind, c, a, b);
                }
            });
        )*};
    }
    dot_wrappers!(
        dot_ssd => Tdpbssd,
        dot_sud => Tdpbsud,
        dot_usd => Tdpbusd,
        dot_uud => Tdpbuud,
        dot_bf16 => Tdpbf16ps,
        dot_fp16 => Tdpfp16ps
    );

    /// Wrappers that call a dispatcher with constant tile numbers: once the optimizer has folded
    /// the `match`, the section holds only the arm for those numbers, which shows that the
    /// dispatcher maps each number to the instruction on that tile.
    macro_rules! fixed_wrappers {
        ($($name:ident => $call:ident($($arg:expr),*);)*) => {$(
            wrapper!($name() {
                // SAFETY: never called; only its code bytes are read.
                unsafe {
                    $call($($arg),*);
                }
            });
        )*};
    }
    fixed_wrappers! {
        zero_0 => tilezero_dyn(0);
        zero_1 => tilezero_dyn(1);
        zero_2 => tilezero_dyn(2);
        zero_3 => tilezero_dyn(3);
        zero_4 => tilezero_dyn(4);
        zero_5 => tilezero_dyn(5);
        zero_6 => tilezero_dyn(6);
        zero_7 => tilezero_dyn(7);
        load_2 => tileloadd_dyn(2, core::ptr::null(), 64);
        load_6 => tileloadd_dyn(6, core::ptr::null(), 64);
        load_t1_1 => tileloaddt1_dyn(1, core::ptr::null(), 64);
        load_t1_7 => tileloaddt1_dyn(7, core::ptr::null(), 64);
        store_0 => tilestored_dyn(0, core::ptr::null_mut(), 64);
        store_5 => tilestored_dyn(5, core::ptr::null_mut(), 64);
        ssd_012 => dot_dyn(DotKind::Tdpbssd, 0, 1, 2);
        ssd_765 => dot_dyn(DotKind::Tdpbssd, 7, 6, 5);
        sud_314 => dot_dyn(DotKind::Tdpbsud, 3, 1, 4);
        usd_270 => dot_dyn(DotKind::Tdpbusd, 2, 7, 0);
        uud_536 => dot_dyn(DotKind::Tdpbuud, 5, 3, 6);
        bf16_461 => dot_dyn(DotKind::Tdpbf16ps, 4, 6, 1);
        fp16_123 => dot_dyn(DotKind::Tdpfp16ps, 1, 2, 3);
        alias_ssd_110 => dot_dyn(DotKind::Tdpbssd, 1, 1, 0);
        alias_bf16_020 => dot_dyn(DotKind::Tdpbf16ps, 0, 2, 0);
        zero_8 => tilezero_dyn(8);
    }

    use amx_tilecfg::decode::{self, pp::*};

    /// An AMX instruction found in machine code: VEX.pp, opcode (map 0F38), ModRM.reg (with
    /// VEX.R), ModRM.rm (with VEX.B), VEX.vvvv (inverted back), whether the ModRM names a
    /// register (mod = 11), the SIB scale and whether the SIB has an index (without one the
    /// stride would be 0), and VEX.W and VEX.L.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Amx {
        pp: u8,
        opcode: u8,
        reg: u8,
        rm: u8,
        vvvv: u8,
        register_form: bool,
        sib_scale: Option<u8>,
        sib_index: bool,
        w: bool,
        l: bool,
    }

    /// Every three-byte-VEX instruction of map 0F38 with an AMX opcode in `code`, read by the
    /// project's decoder at every offset.
    fn amx_instructions(code: &[u8]) -> Vec<Amx> {
        let mut found = Vec::new();
        for i in 0..code.len() {
            let Some(f) = decode::vex(&code[i..]) else {
                continue;
            };
            if f.prefixes != 0 || !decode::AMX_OPCODES.contains(&f.opcode) {
                continue;
            }
            found.push(Amx {
                pp: f.pp,
                opcode: f.opcode,
                reg: f.reg(),
                rm: f.rm(),
                vvvv: f.vvvv,
                register_form: f.register_form(),
                sib_scale: f.scale(),
                sib_index: f.index().is_some(),
                w: f.w,
                l: f.l,
            });
        }
        found
    }

    /// Checks that `code` holds one instruction `pp`/`opcode` on each tile 0..8 in ModRM.reg,
    /// all memory forms with a SIB of scale 1, and nothing else.
    fn check_one_tile_dispatch(code: &[u8], pp: u8, opcode: u8) {
        let found = amx_instructions(code);
        for t in 0..8 {
            assert!(
                found.iter().any(|i| i.reg == t),
                "no instruction on tmm{t} in {code:02x?}"
            );
        }
        for i in &found {
            assert_eq!(
                (i.pp, i.opcode, i.w, i.l),
                (pp, opcode, false, false),
                "{i:?}"
            );
            assert!(i.reg < 8 && !i.register_form && i.vvvv == 0, "{i:?}");
            assert_eq!(
                i.sib_scale,
                Some(0),
                "stride must be a SIB index with scale 1: {i:?}"
            );
            assert!(i.sib_index, "stride must be a SIB index: {i:?}");
        }
    }

    #[test]
    fn tilezero_dispatch_names_each_tile() {
        let found = amx_instructions(code_of!(zero_dyn));
        let mut seen = [false; 8];
        for i in &found {
            // VEX.128.F2.0F38.W0 49 11:rrr:000, vvvv = 1111.
            assert_eq!(
                (i.pp, i.opcode, i.w, i.l),
                (PF2, 0x49, false, false),
                "{i:?}"
            );
            assert!(
                i.register_form && i.rm == 0 && i.vvvv == 0 && i.reg < 8,
                "{i:?}"
            );
            seen[i.reg as usize] = true;
        }
        assert_eq!(seen, [true; 8]);
    }

    #[test]
    fn tileloadd_dispatch_names_each_tile() {
        check_one_tile_dispatch(code_of!(load_dyn), PF2, 0x4B);
    }

    #[test]
    fn tileloaddt1_dispatch_names_each_tile() {
        check_one_tile_dispatch(code_of!(load_t1_dyn), P66, 0x4B);
    }

    #[test]
    fn tilestored_dispatch_names_each_tile() {
        check_one_tile_dispatch(code_of!(store_dyn), PF3, 0x4B);
    }

    #[test]
    fn dot_dispatch_names_each_distinct_triple() {
        let cases: [(&[u8], u8, u8); 6] = [
            (code_of!(dot_ssd), PF2, 0x5E),
            (code_of!(dot_sud), PF3, 0x5E),
            (code_of!(dot_usd), P66, 0x5E),
            (code_of!(dot_uud), NP, 0x5E),
            (code_of!(dot_bf16), PF3, 0x5C),
            (code_of!(dot_fp16), PF2, 0x5C),
        ];
        for (code, pp, opcode) in cases {
            let found = amx_instructions(code);
            for i in &found {
                assert_eq!(
                    (i.pp, i.opcode, i.w, i.l),
                    (pp, opcode, false, false),
                    "{i:?}"
                );
                assert!(
                    i.register_form && i.reg < 8 && i.rm < 8 && i.vvvv < 8,
                    "{i:?}"
                );
            }
            for c in 0..8 {
                for a in 0..8 {
                    for b in 0..8 {
                        let here = found.iter().any(|i| (i.reg, i.rm, i.vvvv) == (c, a, b));
                        if c != a && c != b && a != b {
                            assert!(here, "no {opcode:02x}/pp{pp} for C={c} A={a} B={b}");
                        }
                    }
                }
            }
        }
    }

    /// The AMX instructions of a wrapper that calls a dispatcher with constants, or `None`
    /// (after saying so) when the optimizer did not fold the dispatch (opt-level 0).
    fn folded(name: &str, code: &[u8], max: usize) -> Option<Vec<Amx>> {
        let found = amx_instructions(code);
        if found.len() > max {
            println!("skipping the mapping check of {name}: dispatch not constant-folded");
            return None;
        }
        Some(found)
    }

    #[test]
    fn dispatchers_map_each_number_to_its_tile() {
        let zeros: [&[u8]; 8] = [
            code_of!(zero_0),
            code_of!(zero_1),
            code_of!(zero_2),
            code_of!(zero_3),
            code_of!(zero_4),
            code_of!(zero_5),
            code_of!(zero_6),
            code_of!(zero_7),
        ];
        for (t, code) in (0u8..).zip(zeros) {
            if let Some(found) = folded("tilezero_dyn", code, 1) {
                // The exact TILEZERO encoding: C4 E2 7B 49 11:ttt:000.
                let expected = [0xC4, 0xE2, 0x7B, 0x49, 0xC0 | t << 3];
                assert_eq!(found.len(), 1, "tilezero_dyn({t}): {code:02x?}");
                assert!(
                    code.windows(5).any(|w| w == expected),
                    "tilezero_dyn({t}): {code:02x?}"
                );
            }
        }
        let memory: [(&str, &[u8], u8, u8); 6] = [
            ("tileloadd_dyn", code_of!(load_2), 2, PF2),
            ("tileloadd_dyn", code_of!(load_6), 6, PF2),
            ("tileloaddt1_dyn", code_of!(load_t1_1), 1, P66),
            ("tileloaddt1_dyn", code_of!(load_t1_7), 7, P66),
            ("tilestored_dyn", code_of!(store_0), 0, PF3),
            ("tilestored_dyn", code_of!(store_5), 5, PF3),
        ];
        for (name, code, t, pp) in memory {
            if let Some(found) = folded(name, code, 1) {
                assert_eq!(found.len(), 1, "{name}({t}): {code:02x?}");
                let i = found[0];
                assert_eq!(
                    (i.pp, i.opcode, i.reg, i.sib_scale),
                    (pp, 0x4B, t, Some(0)),
                    "{i:?}"
                );
                assert!(i.sib_index && !i.register_form && !i.w && !i.l, "{i:?}");
            }
        }
        /// Mnemonic, code, VEX.pp, opcode, [C, A, B].
        type DotCase = (&'static str, &'static [u8], u8, u8, [u8; 3]);
        let dots: [DotCase; 7] = [
            ("TDPBSSD", code_of!(ssd_012), PF2, 0x5E, [0, 1, 2]),
            ("TDPBSSD", code_of!(ssd_765), PF2, 0x5E, [7, 6, 5]),
            ("TDPBSUD", code_of!(sud_314), PF3, 0x5E, [3, 1, 4]),
            ("TDPBUSD", code_of!(usd_270), P66, 0x5E, [2, 7, 0]),
            ("TDPBUUD", code_of!(uud_536), NP, 0x5E, [5, 3, 6]),
            ("TDPBF16PS", code_of!(bf16_461), PF3, 0x5C, [4, 6, 1]),
            ("TDPFP16PS", code_of!(fp16_123), PF2, 0x5C, [1, 2, 3]),
        ];
        for (name, code, pp, opcode, [c, a, b]) in dots {
            if let Some(found) = folded(name, code, 1) {
                // The exact encoding: C4 E2 [W0 ~B L0 pp] op [11 C A].
                let expected = [0xC4, 0xE2, (!b & 0xF) << 3 | pp, opcode, 0xC0 | c << 3 | a];
                assert_eq!(found.len(), 1, "{name} {c},{a},{b}: {code:02x?}");
                assert!(
                    code.windows(5).any(|w| w == expected),
                    "{name}: {code:02x?}"
                );
            }
        }
        // Aliased operands and tile 8 execute nothing.
        let nothing: [(&str, &[u8]); 3] = [
            ("dot_dyn(1, 1, 0)", code_of!(alias_ssd_110)),
            ("dot_dyn(0, 2, 0)", code_of!(alias_bf16_020)),
            ("tilezero_dyn(8)", code_of!(zero_8)),
        ];
        for (name, code) in nothing {
            if let Some(found) = folded(name, code, 0) {
                assert!(found.is_empty(), "{name}: {code:02x?}");
            }
        }
    }

    #[test]
    fn xsave_saves_component_18_only() {
        let code = code_of!(save_tiledata);
        // mov eax, 0x40000 (RFBM low half) and XSAVE m: [REX] 0F AE /4 with mod != 11.
        assert!(
            code.windows(5).any(|w| w == [0xB8, 0x00, 0x00, 0x04, 0x00]),
            "EAX = 1 << 18 not found in {code:02x?}"
        );
        let xsave = code
            .windows(3)
            .position(|w| w[0] == 0x0F && w[1] == 0xAE && (w[2] >> 3) & 7 == 4 && w[2] >> 6 != 3);
        let at = xsave.unwrap_or_else(|| panic!("no XSAVE in {code:02x?}"));
        // No REX.W (that would be XSAVE64), at most a REX.B for the base register.
        if at > 0 && code[at - 1] & 0xF0 == 0x40 {
            assert_eq!(code[at - 1] & 0x08, 0, "REX.W set: {code:02x?}");
        }
    }

    // The new generations' instructions, with the operands of LLVM's MC tests
    // (llvm/test/MC/X86/AMX/amx-fp8-intel.s, x86-64-amx-complex-intel.s,
    // x86-64-amx-movrs-intel.s, llvm/test/MC/X86/amx-avx512-intel.s), whose bytes are those
    // tests' expected encodings.
    fixed_wrappers! {
        bf8_654 => product_dyn(Product::Tdpbf8ps, 6, 5, 4);
        bf8_321 => product_dyn(Product::Tdpbf8ps, 3, 2, 1);
        bhf8_654 => product_dyn(Product::Tdpbhf8ps, 6, 5, 4);
        hbf8_321 => product_dyn(Product::Tdphbf8ps, 3, 2, 1);
        hf8_654 => product_dyn(Product::Tdphf8ps, 6, 5, 4);
        cmmim_654 => product_dyn(Product::Tcmmimfp16ps, 6, 5, 4);
        cmmrl_321 => product_dyn(Product::Tcmmrlfp16ps, 3, 2, 1);
        alias_bf8_110 => product_dyn(Product::Tdpbf8ps, 1, 1, 0);
        loadrs_3 => tileloaddrs_dyn(3, core::ptr::null(), 64, false);
        loadrs_t1_6 => tileloaddrs_dyn(6, core::ptr::null(), 64, true);
    }

    /// A wrapper compiled with AVX-512F, so that the row moves (which need it for their zmm
    /// register) are inlined into it.
    macro_rules! zmm_wrapper {
        ($name:ident() $body:block) => {
            #[unsafe(link_section = concat!("amx_asm_", stringify!($name)))]
            #[inline(never)]
            #[target_feature(enable = "avx512f")]
            unsafe extern "C" fn $name() $body
        };
    }

    /// Wrappers of the r32 forms through the dispatcher (the row in ECX, 0 here).
    macro_rules! row_wrappers {
        ($($name:ident => $op:ident, $t:literal;)*) => {$(
            zmm_wrapper!($name() {
                // SAFETY: never called; only its code bytes are read.
                unsafe {
                    row_dyn(RowOp::$op, $t, 0);
                }
            });
        )*};
    }
    row_wrappers! {
        movrow_3 => Move, 3;
        d2ps_5 => D2ps, 5;
        bf16h_2 => Ps2bf16h, 2;
        bf16l_5 => Ps2bf16l, 5;
        phh_5 => Ps2phh, 5;
        phl_2 => Ps2phl, 2;
    }

    /// Wrappers of the immediate forms, with row 123 as in LLVM's tests.
    macro_rules! imm_wrappers {
        ($($name:ident => $f:ident::<$t:literal>;)*) => {$(
            zmm_wrapper!($name() {
                // SAFETY: never called; only its code bytes are read.
                unsafe {
                    $f::<$t, 123>();
                }
            });
        )*};
    }
    imm_wrappers! {
        movrowi_3 => tilemovrowi::<3>;
        d2psi_5 => tcvtrowd2psi::<5>;
        bf16hi_2 => tcvtrowps2bf16hi::<2>;
        bf16li_5 => tcvtrowps2bf16li::<5>;
        phhi_5 => tcvtrowps2phhi::<5>;
        phli_2 => tcvtrowps2phli::<2>;
    }

    fn holds(code: &[u8], bytes: &[u8]) -> bool {
        code.windows(bytes.len()).any(|w| w == bytes)
    }

    #[test]
    fn next_generation_encodings_are_llvms() {
        let expected: [(&str, &[u8], &[u8]); 20] = [
            (
                "tdpbf8ps tmm6, tmm5, tmm4",
                code_of!(bf8_654),
                &[0xc4, 0xe5, 0x58, 0xfd, 0xf5],
            ),
            (
                "tdpbf8ps tmm3, tmm2, tmm1",
                code_of!(bf8_321),
                &[0xc4, 0xe5, 0x70, 0xfd, 0xda],
            ),
            (
                "tdpbhf8ps tmm6, tmm5, tmm4",
                code_of!(bhf8_654),
                &[0xc4, 0xe5, 0x5b, 0xfd, 0xf5],
            ),
            (
                "tdphbf8ps tmm3, tmm2, tmm1",
                code_of!(hbf8_321),
                &[0xc4, 0xe5, 0x72, 0xfd, 0xda],
            ),
            (
                "tdphf8ps tmm6, tmm5, tmm4",
                code_of!(hf8_654),
                &[0xc4, 0xe5, 0x59, 0xfd, 0xf5],
            ),
            (
                "tcmmimfp16ps tmm6, tmm5, tmm4",
                code_of!(cmmim_654),
                &[0xc4, 0xe2, 0x59, 0x6c, 0xf5],
            ),
            (
                "tcmmrlfp16ps tmm3, tmm2, tmm1",
                code_of!(cmmrl_321),
                &[0xc4, 0xe2, 0x70, 0x6c, 0xda],
            ),
            (
                "tilemovrow zmm22, tmm3, ecx",
                code_of!(movrow_3),
                &[0x62, 0xe2, 0x75, 0x48, 0x4a, 0xf3],
            ),
            (
                "tcvtrowd2ps zmm22, tmm5, ecx",
                code_of!(d2ps_5),
                &[0x62, 0xe2, 0x76, 0x48, 0x4a, 0xf5],
            ),
            (
                "tcvtrowps2bf16h zmm22, tmm2, ecx",
                code_of!(bf16h_2),
                &[0x62, 0xe2, 0x77, 0x48, 0x6d, 0xf2],
            ),
            (
                "tcvtrowps2bf16l zmm22, tmm5, ecx",
                code_of!(bf16l_5),
                &[0x62, 0xe2, 0x76, 0x48, 0x6d, 0xf5],
            ),
            (
                "tcvtrowps2phh zmm22, tmm5, ecx",
                code_of!(phh_5),
                &[0x62, 0xe2, 0x74, 0x48, 0x6d, 0xf5],
            ),
            (
                "tcvtrowps2phl zmm22, tmm2, ecx",
                code_of!(phl_2),
                &[0x62, 0xe2, 0x75, 0x48, 0x6d, 0xf2],
            ),
            (
                "tilemovrow zmm22, tmm3, 123",
                code_of!(movrowi_3),
                &[0x62, 0xe3, 0x7d, 0x48, 0x07, 0xf3, 0x7b],
            ),
            (
                "tcvtrowd2ps zmm22, tmm5, 123",
                code_of!(d2psi_5),
                &[0x62, 0xe3, 0x7e, 0x48, 0x07, 0xf5, 0x7b],
            ),
            (
                "tcvtrowps2bf16h zmm22, tmm2, 123",
                code_of!(bf16hi_2),
                &[0x62, 0xe3, 0x7f, 0x48, 0x07, 0xf2, 0x7b],
            ),
            (
                "tcvtrowps2bf16l zmm22, tmm5, 123",
                code_of!(bf16li_5),
                &[0x62, 0xe3, 0x7e, 0x48, 0x77, 0xf5, 0x7b],
            ),
            (
                "tcvtrowps2phh zmm22, tmm5, 123",
                code_of!(phhi_5),
                &[0x62, 0xe3, 0x7c, 0x48, 0x07, 0xf5, 0x7b],
            ),
            (
                "tcvtrowps2phl zmm22, tmm2, 123",
                code_of!(phli_2),
                &[0x62, 0xe3, 0x7f, 0x48, 0x77, 0xf2, 0x7b],
            ),
            // The ECX of the r32 forms: a different register would change EVEX.vvvv.
            (
                "tilemovrow zmm22, tmm3, ecx (vvvv)",
                code_of!(movrow_3),
                &[0x75, 0x48, 0x4a],
            ),
        ];
        for (instruction, code, bytes) in expected {
            assert!(
                holds(code, bytes),
                "{instruction}: {bytes:02x?} not in {code:02x?}"
            );
        }
        // Aliased tiles: nothing is emitted for them.
        assert!(
            !holds(code_of!(alias_bf8_110), &[0xc4, 0xe5]),
            "{:02x?}",
            code_of!(alias_bf8_110)
        );
    }

    #[test]
    fn read_shared_loads_are_map_0f38_4a() {
        // VEX.128.F2.0F38.W0 4A (TILELOADDRS) and VEX.128.66.0F38.W0 4A (TILELOADDRST1), as in
        // LLVM's tests; the registers of the memory operand are the compiler's.
        for (code, pp, t) in [
            (code_of!(loadrs_3), 3u8, 3u8),
            (code_of!(loadrs_t1_6), 1, 6),
        ] {
            let found = code.windows(5).any(|w| {
                w[0] == 0xc4
                    && w[1] & 0x1f == 2
                    && w[2] & 0x7f == 0x78 | pp
                    && w[3] == 0x4a
                    && (w[4] >> 3) & 7 == t
                    && w[4] & 7 == 4
                    && w[4] >> 6 != 3
            });
            assert!(found, "tile {t}, pp {pp}: {code:02x?}");
        }
    }
}
