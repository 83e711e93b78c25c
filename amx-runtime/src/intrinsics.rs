//! Intel's AMX C intrinsics, by name, for porting C and nightly-Rust kernels to stable Rust.
//!
//! Each function is one instruction of the crate's raw inline-asm layer, with no check: the
//! same names, argument order and tile-number generics as `core::arch::x86_64` on nightly
//! (stdarch) and as `<immintrin.h>`.
//!
//! | Intrinsic              | Instruction  | Checked method on [`TileUnit`]           |
//! |------------------------|--------------|------------------------------------------|
//! | [`_tile_loadconfig`]   | LDTILECFG    | [`ldtilecfg`](TileUnit::ldtilecfg)       |
//! | [`_tile_storeconfig`]  | STTILECFG    | [`sttilecfg`](TileUnit::sttilecfg)       |
//! | [`_tile_release`]      | TILERELEASE  | [`tilerelease`](TileUnit::tilerelease)   |
//! | [`_tile_zero`]         | TILEZERO     | [`tilezero`](TileUnit::tilezero)         |
//! | [`_tile_loadd`]        | TILELOADD    | [`tileloadd`](TileUnit::tileloadd), [`tileloadd_ptr`](TileUnit::tileloadd_ptr) |
//! | [`_tile_stream_loadd`] | TILELOADDT1  | [`tileloaddt1`](TileUnit::tileloaddt1), [`tileloaddt1_ptr`](TileUnit::tileloaddt1_ptr) |
//! | [`_tile_stored`]       | TILESTORED   | [`tilestored`](TileUnit::tilestored), [`tilestored_ptr`](TileUnit::tilestored_ptr) |
//! | [`_tile_dpbssd`]       | TDPBSSD      | [`tdpbssd`](TileUnit::tdpbssd)           |
//! | [`_tile_dpbsud`]       | TDPBSUD      | [`tdpbsud`](TileUnit::tdpbsud)           |
//! | [`_tile_dpbusd`]       | TDPBUSD      | [`tdpbusd`](TileUnit::tdpbusd)           |
//! | [`_tile_dpbuud`]       | TDPBUUD      | [`tdpbuud`](TileUnit::tdpbuud)           |
//! | [`_tile_dpbf16ps`]     | TDPBF16PS    | [`tdpbf16ps`](TileUnit::tdpbf16ps)       |
//! | [`_tile_dpfp16ps`]     | TDPFP16PS    | [`tdpfp16ps`](TileUnit::tdpfp16ps)       |
//! | [`_tile_loaddrs`]      | TILELOADDRS  | [`tileloaddrs`](TileUnit::tileloaddrs), [`tileloaddrs_ptr`](TileUnit::tileloaddrs_ptr) |
//! | [`_tile_stream_loaddrs`] | TILELOADDRST1 | [`tileloaddrst1`](TileUnit::tileloaddrst1), [`tileloaddrst1_ptr`](TileUnit::tileloaddrst1_ptr) |
//! | [`_tile_dpbf8ps`]      | TDPBF8PS     | [`tdpbf8ps`](TileUnit::tdpbf8ps)         |
//! | [`_tile_dpbhf8ps`]     | TDPBHF8PS    | [`tdpbhf8ps`](TileUnit::tdpbhf8ps)       |
//! | [`_tile_dphbf8ps`]     | TDPHBF8PS    | [`tdphbf8ps`](TileUnit::tdphbf8ps)       |
//! | [`_tile_dphf8ps`]      | TDPHF8PS     | [`tdphf8ps`](TileUnit::tdphf8ps)         |
//! | [`_tile_cmmimfp16ps`]  | TCMMIMFP16PS | [`tcmmimfp16ps`](TileUnit::tcmmimfp16ps) |
//! | [`_tile_cmmrlfp16ps`]  | TCMMRLFP16PS | [`tcmmrlfp16ps`](TileUnit::tcmmrlfp16ps) |
//! | [`_tile_movrow`], [`_tile_movrowi`] | TILEMOVROW | [`tilemovrow`](TileUnit::tilemovrow) |
//! | [`_tile_cvtrowd2ps`], [`_tile_cvtrowd2psi`] | TCVTROWD2PS | [`tcvtrowd2ps`](TileUnit::tcvtrowd2ps) |
//! | [`_tile_cvtrowps2bf16h`], [`_tile_cvtrowps2bf16hi`] | TCVTROWPS2BF16H | [`tcvtrowps2bf16h`](TileUnit::tcvtrowps2bf16h) |
//! | [`_tile_cvtrowps2bf16l`], [`_tile_cvtrowps2bf16li`] | TCVTROWPS2BF16L | [`tcvtrowps2bf16l`](TileUnit::tcvtrowps2bf16l) |
//! | [`_tile_cvtrowps2phh`], [`_tile_cvtrowps2phhi`] | TCVTROWPS2PHH | [`tcvtrowps2phh`](TileUnit::tcvtrowps2phh) |
//! | [`_tile_cvtrowps2phl`], [`_tile_cvtrowps2phli`] | TCVTROWPS2PHL | [`tcvtrowps2phl`](TileUnit::tcvtrowps2phl) |
//!
//! The AMX-AVX512 intrinsics return the zmm register as stdarch types it, and are compiled
//! with the `avx512f` target feature, which their register needs: a CPU with AMX-AVX512 has
//! it. Where the CPU lacks an instruction's feature, it raises #UD, and the trap engine does
//! not stand in for these newer instructions; the checked [`TileUnit`] methods refuse them
//! with a `Fault` instead.
//!
//! # Differences from the C and nightly signatures
//!
//! - **Tile numbers** are `const` generics of type `i32`, as in stdarch (C passes an `int`
//!   constant), so calls and `const` items written for stdarch port unchanged
//!   (`_tile_loadd::<0>(p, 64)`, `const DST: i32 = 4;`). The rest of the crate numbers tiles
//!   with `u8`; this module alone follows the C signatures. A number outside 0..8 is a compile
//!   error, raised when the call is monomorphized (`cargo build`, not `cargo check`). The dot
//!   products also reject two equal tile numbers at compile time: that encoding always raises
//!   #UD.
//!
//!   ```compile_fail
//!   // A negative tile number, which an `i32` can spell, is refused like 8.
//!   unsafe { amx_runtime::intrinsics::_tile_zero::<{ -1 }>() }
//!   ```
//! - **Strides** are in bytes and `usize`, as in stdarch and clang's `<amxintrin.h>` (`__SIZE_TYPE__`; the
//!   Intel guide shows `size_t`). The CPU computes row `r` at `base + r * stride` modulo 2^64, so
//!   a negative stride is passed as its two's complement, e.g. `(-64isize) as usize`.
//!   [`TileUnit::tileloadd_ptr`] and friends take an `isize` instead.
//! - **TCVTROWPS2PHH and TCVTROWPS2PHL** ([`_tile_cvtrowps2phh`], [`_tile_cvtrowps2phl`] and
//!   their immediate forms) return `__m512i` where stdarch returns `__m512h`, a type stable
//!   only since Rust 1.94, above this crate's minimum; the bits are the same (reinterpret them
//!   with `core::mem::transmute` where `__m512h` is available).
//!
//! # Mixing with the safe API
//!
//! These functions bypass the per-thread configuration that [`Hardware`] tracks and checks its
//! calls against. After changing the configuration or start_row through them
//! ([`_tile_loadconfig`], [`_tile_release`], or any tile instruction, which clears start_row),
//! call [`Hardware::resync`] before the next safe call on the thread. The safe calls' bounds
//! checks rely on the tracked shapes, so this is part of each function's safety contract.
//!
//! # Safety, common to every function
//!
//! The CPU implements the instruction's feature (AMX-TILE; AMX-INT8, AMX-BF16 or AMX-FP16 for
//! the dot products) and the OS enabled the AMX state in XCR0. Except for [`_tile_loadconfig`],
//! [`_tile_storeconfig`] and [`_tile_release`], the process must also hold Linux's XTILEDATA
//! permission. [`Hardware::new`] succeeding establishes all of that except AMX-FP16
//! ([`Hardware::amx_fp16`]). Each function lists the rest; meeting it means the instruction
//! raises no exception. Tile state belongs to the thread: the configuration that matters is the
//! one loaded on the calling thread.
//!
//! Where the CPU lacks AMX, these instructions raise #UD (SIGILL); on x86-64 Linux the trap
//! engine of the `amx-trap` crate executes them instead (`amx_trap::install()` in-process, or
//! its library preloaded), one trap per instruction, so the same code runs (and is tested) on
//! any such machine. The example runs where [`Hardware::new`] succeeds: on the silicon, or on
//! the engine standing in for it:
//!
//! ```
//! # #[cfg(target_os = "linux")] {
//! use amx_runtime::intrinsics::*;
//! use amx_runtime::{tilecfg, Hardware, TileConfig, TileUnit};
//!
//! static CFG: TileConfig = tilecfg! { palette 1; t0: 16x16 i32; t1: 16x64; t2: 16x64 };
//! let Ok(mut hw) = Hardware::new() else {
//!     return; // neither AMX nor the trap engine here
//! };
//! let (a, b) = ([1i8; 16 * 64], [2i8; 16 * 64]);
//! let mut c = [0i32; 16 * 16];
//! // Tile numbers as C and stdarch code names them: `int` / `i32` constants.
//! const TC: i32 = 0;
//! const TA: i32 = 1;
//! const TB: i32 = 2;
//! // SAFETY: `Hardware::new` succeeded; CFG uses t0..t2 with shapes that fit TDPBSSD; every
//! // row of a, b and c lies inside its buffer.
//! unsafe {
//!     _tile_loadconfig(CFG.as_bytes().as_ptr());
//!     _tile_zero::<TC>();
//!     _tile_loadd::<TA>(a.as_ptr().cast(), 64);
//!     _tile_loadd::<TB>(b.as_ptr().cast(), 64);
//!     _tile_dpbssd::<TC, TA, TB>();
//!     _tile_stored::<TC>(c.as_mut_ptr().cast(), 64);
//! }
//! hw.resync(); // the safe API sees the configuration the intrinsics loaded
//! assert_eq!(c[0], 16 * 4 * 2);
//! assert_eq!(&hw.loaded_config(), CFG.as_bytes());
//! # }
//! ```
//!
//! [`TileUnit`]: crate::TileUnit
//! [`TileUnit::tileloadd_ptr`]: crate::TileUnit::tileloadd_ptr
//! [`Hardware`]: crate::Hardware
//! [`Hardware::new`]: crate::Hardware::new
//! [`Hardware::resync`]: crate::Hardware::resync
//! [`Hardware::amx_fp16`]: crate::Hardware::amx_fp16

#![cfg(target_arch = "x86_64")]

use core::arch::x86_64::{__m512, __m512bh, __m512i};
use core::mem::transmute;

use crate::unit::asm;
#[allow(unused_imports)] // Used by the intra-doc links.
use crate::TileUnit;

/// LDTILECFG: loads the 64-byte tile configuration at `mem_addr` on this thread and zeroes all
/// tile data (even when the configuration is the one already loaded).
///
/// # Safety
/// The [common conditions](self#safety-common-to-every-function) (the XTILEDATA permission is not
/// needed). The 64 bytes at `mem_addr` are readable (any alignment) and form an image LDTILECFG
/// accepts on this CPU (palette 0, or a palette up to CPUID's maximum whose reserved bytes are
/// zero and whose tiles fit its rows and bytes per row, each used tile with both rows and colsb
/// nonzero; [`TileConfig`](crate::TileConfig) images for this CPU's palette table always are);
/// otherwise #GP. Call [`Hardware::resync`](crate::Hardware::resync) before the next safe call
/// on this thread.
#[inline(always)]
pub unsafe fn _tile_loadconfig(mem_addr: *const u8) {
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::ldtilecfg(mem_addr) }
}

/// STTILECFG: writes this thread's tile configuration to the 64 bytes at `mem_addr` (64 zero
/// bytes when unconfigured).
///
/// # Safety
/// The [common conditions](self#safety-common-to-every-function) (the XTILEDATA permission is not
/// needed). The 64 bytes at `mem_addr` are writable (any alignment) and not aliased by a live
/// reference.
#[inline(always)]
pub unsafe fn _tile_storeconfig(mem_addr: *mut u8) {
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::sttilecfg(mem_addr) }
}

/// TILERELEASE: zeroes all tile data and returns this thread to the unconfigured state.
///
/// # Safety
/// The [common conditions](self#safety-common-to-every-function) (the XTILEDATA permission is not
/// needed); legal configured or not. Call [`Hardware::resync`](crate::Hardware::resync) before
/// the next safe call on this thread.
#[inline(always)]
pub unsafe fn _tile_release() {
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::tilerelease() }
}

/// TILEZERO: zeroes all 1024 bytes of tile `DST` (also the bytes past its rows and colsb).
///
/// # Safety
/// The [common conditions](self#safety-common-to-every-function). A configuration is loaded on
/// this thread and tile `DST` is used in it (rows and colsb nonzero); otherwise #UD. Clears
/// start_row: call [`Hardware::resync`](crate::Hardware::resync) before the next safe call if
/// the safe API loaded a nonzero start_row.
#[inline(always)]
pub unsafe fn _tile_zero<const DST: i32>() {
    const { assert!(0 <= DST && DST < 8, "AMX has tile registers 0 to 7 only") };
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::tilezero::<DST>() }
}

/// TILELOADD: loads tile `DST`, row `r` from the `colsb` bytes at `base + r * stride_bytes`, for the
/// rows `start_row..rows` of its configured shape; zeroes the rest of the tile past those rows
/// and past colsb.
///
/// # Safety
/// The [common conditions](self#safety-common-to-every-function). A configuration is loaded on
/// this thread in which tile `DST` is used, its colsb is a multiple of 4 and start_row is below
/// its rows; otherwise #UD. For every row `r` in `start_row..rows`, the `colsb` bytes at
/// `base.wrapping_add(r.wrapping_mul(stride_bytes))` are readable (any alignment). Call
/// [`Hardware::resync`](crate::Hardware::resync) before the next safe call if the safe API
/// loaded a nonzero start_row.
#[inline(always)]
pub unsafe fn _tile_loadd<const DST: i32>(base: *const u8, stride_bytes: usize) {
    const { assert!(0 <= DST && DST < 8, "AMX has tile registers 0 to 7 only") };
    // SAFETY: forwarded from this function's contract; the isize is the same 64 bits the CPU
    // uses as the SIB index.
    unsafe { asm::tileloadd::<DST>(base, stride_bytes as isize) }
}

/// TILELOADDT1: [`_tile_loadd`] with a hint that the data will not be reused soon (the same
/// architectural result).
///
/// # Safety
/// As for [`_tile_loadd`].
#[inline(always)]
pub unsafe fn _tile_stream_loadd<const DST: i32>(base: *const u8, stride_bytes: usize) {
    const { assert!(0 <= DST && DST < 8, "AMX has tile registers 0 to 7 only") };
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::tileloaddt1::<DST>(base, stride_bytes as isize) }
}

/// TILESTORED: writes the `colsb` bytes of each row `r` in `start_row..rows` of tile `DST` to
/// `base + r * stride_bytes`, and nothing else.
///
/// # Safety
/// As for [`_tile_loadd`] (the same #UD conditions), and for every row `r` in
/// `start_row..rows` the `colsb` bytes at `base.wrapping_add(r.wrapping_mul(stride_bytes))` are
/// writable and not aliased by a live reference.
#[inline(always)]
pub unsafe fn _tile_stored<const DST: i32>(base: *mut u8, stride_bytes: usize) {
    const { assert!(0 <= DST && DST < 8, "AMX has tile registers 0 to 7 only") };
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::tilestored::<DST>(base, stride_bytes as isize) }
}

/// Defines one dot-product intrinsic over the raw layer's function of the same instruction.
macro_rules! dot_intrinsic {
    ($(#[$doc:meta])* $name:ident => $raw:ident, $feature:literal) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The [common conditions](self#safety-common-to-every-function), and the CPU
        #[doc = concat!("implements ", $feature, ".")]
        /// A configuration is loaded on this thread in which tiles `DST` (C), `A` and `B` are
        /// used, every colsb is a multiple of 4, `C.rows == A.rows`, `C.colsb == B.colsb`,
        /// `A.colsb / 4 == B.rows`, and `B.rows` and `C.colsb` are within the TMUL limits
        /// (CPUID leaf 0x1E); otherwise #UD. Clears start_row: call
        /// [`Hardware::resync`](crate::Hardware::resync) before the next safe call if the safe
        /// API loaded a nonzero start_row.
        #[inline(always)]
        pub unsafe fn $name<const DST: i32, const A: i32, const B: i32>() {
            const {
                assert!(
                    0 <= DST && DST < 8 && 0 <= A && A < 8 && 0 <= B && B < 8,
                    "AMX has tile registers 0 to 7 only"
                );
                assert!(
                    DST != A && DST != B && A != B,
                    "the three tiles of a dot product must differ (equal ones raise #UD)"
                );
            };
            // SAFETY: forwarded from this function's contract.
            unsafe { asm::$raw::<DST, A, B>() }
        }
    };
}

dot_intrinsic!(
    /// TDPBSSD: `DST += A x B`, each i32 of `DST` accumulating dot products of four signed bytes
    /// of `A` with four signed bytes of `B` (32-bit wraparound).
    _tile_dpbssd => tdpbssd, "AMX-INT8"
);
dot_intrinsic!(
    /// TDPBSUD: as [`_tile_dpbssd`] with signed bytes in `A` and unsigned bytes in `B`.
    _tile_dpbsud => tdpbsud, "AMX-INT8"
);
dot_intrinsic!(
    /// TDPBUSD: as [`_tile_dpbssd`] with unsigned bytes in `A` and signed bytes in `B`.
    _tile_dpbusd => tdpbusd, "AMX-INT8"
);
dot_intrinsic!(
    /// TDPBUUD: as [`_tile_dpbssd`] with unsigned bytes in both `A` and `B`.
    _tile_dpbuud => tdpbuud, "AMX-INT8"
);
dot_intrinsic!(
    /// TDPBF16PS: `DST += A x B`, each f32 of `DST` accumulating dot products of bf16 pairs.
    _tile_dpbf16ps => tdpbf16ps, "AMX-BF16"
);
dot_intrinsic!(
    /// TDPFP16PS: `DST += A x B`, each f32 of `DST` accumulating dot products of fp16 pairs.
    _tile_dpfp16ps => tdpfp16ps,
    "AMX-FP16 (CPUID.(7,1):EAX\\[21\\]; a hypervisor may hide the bit of a core that has it, \
     [semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md) F1)"
);

dot_intrinsic!(
    /// TDPBF8PS: `DST += A x B`, each f32 of `DST` accumulating dot products of four bf8
    /// (E5M2) values of `A` with four of `B`.
    _tile_dpbf8ps => tdpbf8ps, "AMX-FP8 (CPUID.(0x1E,1):EAX\\[4\\])"
);
dot_intrinsic!(
    /// TDPBHF8PS: as [`_tile_dpbf8ps`] with bf8 in `A` and hf8 (E4M3) in `B`.
    _tile_dpbhf8ps => tdpbhf8ps, "AMX-FP8 (CPUID.(0x1E,1):EAX\\[4\\])"
);
dot_intrinsic!(
    /// TDPHBF8PS: as [`_tile_dpbf8ps`] with hf8 (E4M3) in `A` and bf8 in `B`.
    _tile_dphbf8ps => tdphbf8ps, "AMX-FP8 (CPUID.(0x1E,1):EAX\\[4\\])"
);
dot_intrinsic!(
    /// TDPHF8PS: as [`_tile_dpbf8ps`] with hf8 (E4M3) in both `A` and `B`.
    _tile_dphf8ps => tdphf8ps, "AMX-FP8 (CPUID.(0x1E,1):EAX\\[4\\])"
);
dot_intrinsic!(
    /// TCMMIMFP16PS: `DST += A x B` for complex numbers (one per dword, fp16 real part low,
    /// fp16 imaginary part high), accumulating the imaginary part of each product into f32.
    _tile_cmmimfp16ps => tcmmimfp16ps, "AMX-COMPLEX (CPUID.(7,1):EDX\\[8\\])"
);
dot_intrinsic!(
    /// TCMMRLFP16PS: as [`_tile_cmmimfp16ps`], accumulating the real part.
    _tile_cmmrlfp16ps => tcmmrlfp16ps, "AMX-COMPLEX (CPUID.(7,1):EDX\\[8\\])"
);

/// TILELOADDRS: [`_tile_loadd`] with a hint that other cores will read the data too (the same
/// architectural result).
///
/// # Safety
/// As for [`_tile_loadd`], and the CPU implements AMX-MOVRS (CPUID.(0x1E,1):EAX\[8\]).
#[inline(always)]
pub unsafe fn _tile_loaddrs<const DST: i32>(base: *const u8, stride_bytes: usize) {
    const { assert!(0 <= DST && DST < 8, "AMX has tile registers 0 to 7 only") };
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::tileloaddrs::<DST>(base, stride_bytes as isize) }
}

/// TILELOADDRST1: [`_tile_stream_loadd`] with the hint of [`_tile_loaddrs`].
///
/// # Safety
/// As for [`_tile_loaddrs`].
#[inline(always)]
pub unsafe fn _tile_stream_loaddrs<const DST: i32>(base: *const u8, stride_bytes: usize) {
    const { assert!(0 <= DST && DST < 8, "AMX has tile registers 0 to 7 only") };
    // SAFETY: forwarded from this function's contract.
    unsafe { asm::tileloaddrst1::<DST>(base, stride_bytes as isize) }
}

/// The vector type an AMX-AVX512 intrinsic returns, made from the zmm register's bits.
trait Zmm {
    /// The same 512 bits as `Self`.
    fn from_zmm(v: __m512i) -> Self;
}

impl Zmm for __m512i {
    fn from_zmm(v: __m512i) -> Self {
        v
    }
}

impl Zmm for __m512 {
    fn from_zmm(v: __m512i) -> Self {
        // SAFETY: both are 64 bytes with no invalid bit pattern.
        unsafe { transmute::<__m512i, __m512>(v) }
    }
}

impl Zmm for __m512bh {
    fn from_zmm(v: __m512i) -> Self {
        // SAFETY: both are 64 bytes with no invalid bit pattern.
        unsafe { transmute::<__m512i, __m512bh>(v) }
    }
}

/// Defines the two intrinsics of one AMX-AVX512 row move: the row as a `u32` and as the
/// constant `ROW`.
macro_rules! row_intrinsic {
    ($(#[$doc:meta])* $name:ident, $imm:ident => $raw:ident, $raw_imm:ident, $ty:ty) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// The [common conditions](self#safety-common-to-every-function), and the CPU implements
        /// AMX-AVX512 (CPUID.(0x1E,1):EAX\[7\]) with the AVX-512 state enabled by the OS. A
        /// configuration is loaded on this thread in which tile `TILE` is used and its colsb is
        /// a multiple of 4; otherwise #UD. Clears start_row: call
        /// [`Hardware::resync`](crate::Hardware::resync) before the next safe call if the safe
        /// API loaded a nonzero start_row.
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub unsafe fn $name<const TILE: i32>(row: u32) -> $ty {
            const { assert!(0 <= TILE && TILE < 8, "AMX has tile registers 0 to 7 only") };
            // SAFETY: forwarded from this function's contract; a 512-bit vector is reread as
            // another with the same bits.
            unsafe { <$ty as Zmm>::from_zmm(asm::$raw::<TILE>(row)) }
        }

        /// The immediate form of
        #[doc = concat!("[`", stringify!($name), "`]:")]
        /// the row is `ROW` (0 to 63, as in stdarch; an imm8 of the instruction whose chunk bits 6
        /// and 7 are zero).
        ///
        /// # Safety
        #[doc = concat!("As for [`", stringify!($name), "`].")]
        #[inline]
        #[target_feature(enable = "avx512f")]
        pub unsafe fn $imm<const TILE: i32, const ROW: i32>() -> $ty {
            const {
                assert!(0 <= TILE && TILE < 8, "AMX has tile registers 0 to 7 only");
                assert!(0 <= ROW && ROW < 64, "the row is a 6-bit constant");
            };
            // SAFETY: as above.
            unsafe { <$ty as Zmm>::from_zmm(asm::$raw_imm::<TILE, ROW>()) }
        }
    };
}

row_intrinsic!(
    /// TILEMOVROW: row `row & 0xFFFF` of tile `TILE` (its 64-byte chunk `row >> 16`, which is
    /// past the row unless 0) as a 512-bit vector, the dwords past its
    /// colsb zero; all zero when that row is not below the tile's rows.
    _tile_movrow, _tile_movrowi => tilemovrow, tilemovrowi, __m512i
);
row_intrinsic!(
    /// TCVTROWD2PS: the row of [`_tile_movrow`], each int32 converted to fp32 (round to
    /// nearest even whatever MXCSR says).
    _tile_cvtrowd2ps, _tile_cvtrowd2psi => tcvtrowd2ps, tcvtrowd2psi, __m512
);
row_intrinsic!(
    /// TCVTROWPS2BF16H: the row of [`_tile_movrow`], each fp32 converted to bf16 in the high
    /// half of its dword, the low half zero.
    _tile_cvtrowps2bf16h, _tile_cvtrowps2bf16hi => tcvtrowps2bf16h, tcvtrowps2bf16hi, __m512bh
);
row_intrinsic!(
    /// TCVTROWPS2BF16L: as [`_tile_cvtrowps2bf16h`] in the low half, the high half zero.
    _tile_cvtrowps2bf16l, _tile_cvtrowps2bf16li => tcvtrowps2bf16l, tcvtrowps2bf16li, __m512bh
);
row_intrinsic!(
    /// TCVTROWPS2PHH: the row of [`_tile_movrow`], each fp32 converted to fp16 in the high half
    /// of its dword, the low half zero.
    _tile_cvtrowps2phh, _tile_cvtrowps2phhi => tcvtrowps2phh, tcvtrowps2phhi, __m512i
);
row_intrinsic!(
    /// TCVTROWPS2PHL: as [`_tile_cvtrowps2phh`] in the low half, the high half zero.
    _tile_cvtrowps2phl, _tile_cvtrowps2phli => tcvtrowps2phl, tcvtrowps2phli, __m512i
);
