//! The tile unit: one trait whose methods are named after the AMX instructions, implemented by
//! the silicon ([`Hardware`]) and by a bit-exact software model ([`Emulator`]).
//!
//! Both implementations run the same checks ([`check`]) before they execute, so for the same
//! state and operands they return the same [`Fault`], and a safe call on the hardware never raises
//! a real #GP or #UD.

pub(crate) mod asm;
pub(crate) mod check;
mod emulator;
mod hardware;
pub(crate) mod numerics;

pub use emulator::{Emulator, UnsupportedTable};
pub use hardware::Hardware;
pub(crate) use hardware::{give_back_tracked, take_tracked};

use crate::error::{Fault, Feature, Mnemonic};

/// Bytes of data per tile register (16 rows of 64 bytes).
pub const TILE_BYTES: usize = 1024;
/// Bytes per tile register row.
pub const ROW_BYTES: usize = 64;
/// Number of tile registers.
pub const TILES: usize = 8;

/// The AMX instructions, as methods. `t`, `c`, `a`, `b` are tile register numbers (0..8).
///
/// Loads and stores take byte slices, so their strides count bytes, the slice's elements;
/// [`Fault::OutOfBounds`] counts them too. A stride shorter than a row is accepted: the rows
/// overlap in memory (a load of stride 0 fills every row with the same bytes; a store writes
/// its rows in order, so where they overlap the later row's bytes remain).
///
/// Every method checks the conditions under which the silicon would fault and returns that
/// [`Fault`] instead, leaving the state untouched.
pub trait TileUnit {
    /// LDTILECFG: loads a configuration image. Palette 0 releases the tiles whatever the other
    /// bytes hold; an image that breaks a load-time rule is `Fault::GeneralProtection` and
    /// leaves the previous state unchanged; success zeroes all tile data, even when the image
    /// equals the loaded one.
    fn ldtilecfg(&mut self, image: &[u8; 64]) -> Result<(), Fault>;

    /// STTILECFG: the loaded configuration image, or 64 zero bytes when unconfigured.
    fn sttilecfg(&mut self) -> [u8; 64];

    /// TILERELEASE: zeroes all tile data and returns to the unconfigured (INIT) state.
    fn tilerelease(&mut self);

    /// The configuration this unit holds, as STTILECFG would write it, without executing
    /// anything: the tracked state both backends check instructions against.
    fn loaded_config(&self) -> [u8; 64];

    /// TILEZERO: zeroes all 1024 bytes of tile `t`.
    fn tilezero(&mut self, t: u8) -> Result<(), Fault>;

    /// TILELOADD: loads rows `start_row..rows` of tile `t`, row `r` from
    /// `src[r * stride_bytes..r * stride_bytes + colsb]`. Every row touched must lie inside
    /// `src`.
    fn tileloadd(&mut self, t: u8, src: &[u8], stride_bytes: usize) -> Result<(), Fault>;

    /// TILELOADDT1: [`TileUnit::tileloadd`] with a hint that the data will not be reused.
    fn tileloaddt1(&mut self, t: u8, src: &[u8], stride_bytes: usize) -> Result<(), Fault>;

    /// TILESTORED: stores rows `start_row..rows` of tile `t`, row `r` to
    /// `dst[r * stride_bytes..r * stride_bytes + colsb]`, and nothing else.
    fn tilestored(&mut self, t: u8, dst: &mut [u8], stride_bytes: usize) -> Result<(), Fault>;

    /// TILELOADD through a raw pointer and a signed stride in bytes.
    ///
    /// # Safety
    /// For every row `r` in `start_row..rows` of tile `t`, the `colsb` bytes at
    /// `src.offset(r * stride_bytes)` must be readable. The tile-state checks still run.
    unsafe fn tileloadd_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride_bytes: isize,
    ) -> Result<(), Fault>;

    /// TILELOADDT1 through a raw pointer and a signed stride in bytes.
    ///
    /// # Safety
    /// As for [`TileUnit::tileloadd_ptr`].
    unsafe fn tileloaddt1_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride_bytes: isize,
    ) -> Result<(), Fault>;

    /// TILESTORED through a raw pointer and a signed stride in bytes.
    ///
    /// # Safety
    /// For every row `r` in `start_row..rows` of tile `t`, the `colsb` bytes at
    /// `dst.offset(r * stride_bytes)` must be writable and not aliased by any live reference.
    unsafe fn tilestored_ptr(
        &mut self,
        t: u8,
        dst: *mut u8,
        stride_bytes: isize,
    ) -> Result<(), Fault>;

    /// TDPBSSD: `C += A x B`, signed bytes x signed bytes into i32.
    fn tdpbssd(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPBSUD: signed bytes (A) x unsigned bytes (B) into i32.
    fn tdpbsud(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPBUSD: unsigned bytes (A) x signed bytes (B) into i32.
    fn tdpbusd(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPBUUD: unsigned bytes x unsigned bytes into i32.
    fn tdpbuud(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPBF16PS: bf16 pairs into f32.
    fn tdpbf16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPFP16PS: fp16 pairs into f32.
    fn tdpfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;

    /// All 1024 bytes of tile `t`'s data, including the bytes past its rows and colsb.
    fn tile_data(&mut self, t: u8) -> Result<[u8; TILE_BYTES], Fault>;

    /// TILELOADDRS (AMX-MOVRS): [`TileUnit::tileloadd`] with a hint that the data will be
    /// read by other cores too (the same architectural result).
    fn tileloaddrs(&mut self, t: u8, src: &[u8], stride_bytes: usize) -> Result<(), Fault>;

    /// TILELOADDRST1 (AMX-MOVRS): [`TileUnit::tileloaddt1`] with the read-shared hint of
    /// [`TileUnit::tileloaddrs`].
    fn tileloaddrst1(&mut self, t: u8, src: &[u8], stride_bytes: usize) -> Result<(), Fault>;

    /// TILELOADDRS through a raw pointer and a signed stride in bytes.
    ///
    /// # Safety
    /// As for [`TileUnit::tileloadd_ptr`].
    unsafe fn tileloaddrs_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride_bytes: isize,
    ) -> Result<(), Fault>;

    /// TILELOADDRST1 through a raw pointer and a signed stride in bytes.
    ///
    /// # Safety
    /// As for [`TileUnit::tileloadd_ptr`].
    unsafe fn tileloaddrst1_ptr(
        &mut self,
        t: u8,
        src: *const u8,
        stride_bytes: isize,
    ) -> Result<(), Fault>;

    /// TDPBF8PS (AMX-FP8): bf8 (E5M2) quadruples of A and B into f32.
    fn tdpbf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPBHF8PS (AMX-FP8): bf8 (A) x hf8 (B) quadruples into f32.
    fn tdpbhf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPHBF8PS (AMX-FP8): hf8 (A) x bf8 (B) quadruples into f32.
    fn tdphbf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TDPHF8PS (AMX-FP8): hf8 (E4M3) quadruples of A and B into f32.
    fn tdphf8ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TCMMIMFP16PS (AMX-COMPLEX): the imaginary part of the products of the complex fp16
    /// numbers (one per dword, real part low) of A and B, into f32.
    fn tcmmimfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;
    /// TCMMRLFP16PS (AMX-COMPLEX): the real part of those products, into f32.
    fn tcmmrlfp16ps(&mut self, c: u8, a: u8, b: u8) -> Result<(), Fault>;

    /// TILEMOVROW (AMX-AVX512) with the row in a 32-bit register: the 64 bytes of the zmm
    /// register the instruction writes, little-endian: row `row & 0xFFFF` of tile `t`, its
    /// 64-byte chunk `row >> 16` (past every palette-1 row unless 0), with the dwords past
    /// colsb zero; all zero when that row is not below the tile's rows (semantics.md R2-R4).
    fn tilemovrow(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault>;
    /// TCVTROWD2PS (AMX-AVX512): the row as [`TileUnit::tilemovrow`] selects it, each int32
    /// converted to fp32 (round to nearest even).
    fn tcvtrowd2ps(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault>;
    /// TCVTROWPS2BF16H (AMX-AVX512): each fp32 of the row converted to bf16 in the high half
    /// of its dword, the low half zero.
    fn tcvtrowps2bf16h(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault>;
    /// TCVTROWPS2BF16L (AMX-AVX512): each fp32 converted to bf16 in the low half, the high
    /// half zero.
    fn tcvtrowps2bf16l(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault>;
    /// TCVTROWPS2PHH (AMX-AVX512): each fp32 converted to fp16 in the high half, the low half
    /// zero.
    fn tcvtrowps2phh(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault>;
    /// TCVTROWPS2PHL (AMX-AVX512): each fp32 converted to fp16 in the low half, the high half
    /// zero.
    fn tcvtrowps2phl(&mut self, t: u8, row: u32) -> Result<[u8; ROW_BYTES], Fault>;
}

/// The AMX-FP8 and AMX-COMPLEX dot products, which share the operand rules of the others
/// (`amx_tilecfg::check_dot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Product {
    Tdpbf8ps,
    Tdpbhf8ps,
    Tdphbf8ps,
    Tdphf8ps,
    Tcmmimfp16ps,
    Tcmmrlfp16ps,
}

impl Product {
    pub(crate) const fn mnemonic(self) -> Mnemonic {
        match self {
            Product::Tdpbf8ps => Mnemonic::Tdpbf8ps,
            Product::Tdpbhf8ps => Mnemonic::Tdpbhf8ps,
            Product::Tdphbf8ps => Mnemonic::Tdphbf8ps,
            Product::Tdphf8ps => Mnemonic::Tdphf8ps,
            Product::Tcmmimfp16ps => Mnemonic::Tcmmimfp16ps,
            Product::Tcmmrlfp16ps => Mnemonic::Tcmmrlfp16ps,
        }
    }

    pub(crate) const fn feature(self) -> Feature {
        match self {
            Product::Tcmmimfp16ps | Product::Tcmmrlfp16ps => Feature::AmxComplex,
            _ => Feature::AmxFp8,
        }
    }

    /// The decoder's name for the same instruction (the block API's).
    pub(crate) const fn kind(self) -> amx_tilecfg::decode::ProductKind {
        use amx_tilecfg::decode::ProductKind;
        match self {
            Product::Tdpbf8ps => ProductKind::Tdpbf8ps,
            Product::Tdpbhf8ps => ProductKind::Tdpbhf8ps,
            Product::Tdphbf8ps => ProductKind::Tdphbf8ps,
            Product::Tdphf8ps => ProductKind::Tdphf8ps,
            Product::Tcmmimfp16ps => ProductKind::Tcmmimfp16ps,
            Product::Tcmmrlfp16ps => ProductKind::Tcmmrlfp16ps,
        }
    }
}
