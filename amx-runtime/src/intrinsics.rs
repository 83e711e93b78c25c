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
