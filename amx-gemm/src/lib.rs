//! Matrix multiplication on Intel AMX tiles: `C = A x B` and `C += A x B` for
//!
//! | precision | A | B | C | instruction |
//! |---|---|---|---|---|
//! | [`Int8`] | `i8` | `i8` | `i32` | TDPBSSD |
//! | [`U8S8`] | `u8` | `i8` | `i32` | TDPBUSD |
//! | [`S8U8`] | `i8` | `u8` | `i32` | TDPBSUD |
//! | [`U8U8`] | `u8` | `u8` | `i32` | TDPBUUD |
//! | [`Bf16`] | [`bf16`] | [`bf16`] | `f32` | TDPBF16PS |
//! | [`Fp16`] | [`f16`](struct@f16) | [`f16`](struct@f16) | `f32` | TDPFP16PS (AMX-FP16) |
//! | [`Bf8Bf8`] | [`Bf8`] (E5M2) | [`Bf8`] | `f32` | TDPBF8PS (AMX-FP8) |
//! | [`Hf8Hf8`] | [`Hf8`] (E4M3) | [`Hf8`] | `f32` | TDPHF8PS (AMX-FP8) |
//! | [`Bf8Hf8`] | [`Bf8`] | [`Hf8`] | `f32` | TDPBHF8PS (AMX-FP8) |
//! | [`Hf8Bf8`] | [`Hf8`] | [`Bf8`] | `f32` | TDPHBF8PS (AMX-FP8) |
//!
//! A and C are row-major with leading dimensions; B is packed once into the tiles' VNNI layout
//! ([`PackedB`], the inference convention for weights), or packed on the fly by
//! [`Gemm::run_unpacked`]. Any M, N, K work, including 0 and sizes that are not multiples of the
//! 16 x 16 tile: the edges run under their own tile configurations and never touch memory
//! outside the slices. Bad input is an error ([`GemmError`]), never a panic. Calls split the
//! work over a persistent pool of worker threads, each of which keeps its tile configurations
//! loaded from call to call.
//!
//! The tiles run on the CPU's AMX unit when there is one, and on `amx-runtime`'s bit-exact
//! emulator otherwise (or when `AMX_BACKEND=emulated`, or [`Gemm::backend`] says so), with the
//! same results.
//!
//! ```
//! use amx_gemm::{bf16, BRef, Bf16, Gemm, Int8, MatMut, MatRef, Mode, PackedB};
//!
//! // int8: C (2 x 3) = A (2 x 4) x B (4 x 3), B packed once.
//! let a: Vec<i8> = vec![1, 2, 3, 4, -1, -2, -3, -4];
//! let b: Vec<i8> = vec![1, 0, 2, 1, 0, 2, 1, 0, 2, 1, 0, 2];
//! let packed = PackedB::<Int8>::pack(&b, 4, 3, 3)?;
//! let mut c = vec![0i32; 6];
//! Gemm::new().run(2, &a, 4, &packed, &mut c, 3)?;
//! assert_eq!(c, [10, 0, 20, -10, 0, -20]);
//!
//! // bf16, accumulating into C, packing B on the fly.
//! let a = vec![bf16::from_f32(0.5); 2 * 3];
//! let b = vec![bf16::from_f32(2.0); 3 * 2];
//! let mut c = vec![1.0f32; 4];
//! let (a, b, c_view) = (MatRef::new(&a, 2, 3), BRef::k_by_n(&b, 3, 2), MatMut::new(&mut c, 2, 2));
//! Gemm::new().mode(Mode::Accumulate).run_unpacked::<Bf16>(a, b, c_view)?;
//! assert_eq!(c, [4.0; 4]);
//! # Ok::<(), amx_gemm::GemmError>(())
//! ```
//!
//! # Linear layers
//!
//! [`Gemm::run_with`] fuses an [`Epilogue`] into the product's write-back: dequantization
//! (activation scale and zero point per tensor or per row, per-tensor, per-channel or
//! per-group weight scales), bias,
//! activation, residual, and `f32`, bf16 or requantized `u8` / `i8` output, with every step's
//! rounding specified ([`epilogue`]). [`Gemm::a_transposed`] takes A column-major and
//! [`Gemm::run_batched`] runs strided batches with B packed on the fly. [`quantize`] turns
//! `f32` activations into `u8` or `i8` with their scales and zero points.
//!
//! # The loop nest
//!
//! The driver is the BLIS loop nest (Goto and van de Geijn; Van Zee and van de Geijn), labelled
//! in the source as in the papers, with two changes: the two innermost loops are swapped, so
//! that **the A micro-panel is reused across the B block** (which stays in L2), and the block
//! of A is packed **once per call** (all of K, or chunks of whole K blocks when a block of `mc`
//! rows would pass 1 MiB), outside the loop over column blocks, instead of once per column
//! block:
//!
//! ```text
//! LOOP 3  ic: the worker's rows in blocks of mc         pack A (mc x K) once -> pack.rs
//! LOOP 5  jc: the worker's columns in blocks of nc      B block (kc x nc) in L2
//! LOOP 4  pc: K in blocks of kc k-steps                 (B is prepacked: no copy here)
//! LOOP 2  ir: the packed block in micro-panels of 32 rows   micro-panel (32 x kc) in L1/L2
//! LOOP 1  jr: the B block in panels of 32 columns           streamed from L2
//!         micro-kernel: 32 x 32 outputs in 4 C tiles, 2 A tiles, 2 B tiles
//! ```
//!
//! [`Blocking`] gives the sizes and why. The micro-kernel's contract is documented on its trait
//! in `kernel.rs`. On the tile instructions C is written once: when K is split, the earlier K
//! blocks sum into a partial-sum block of `mc x nc` that stays in L2, and the last one goes to a
//! 4 KiB scratch tile that the next micro-kernel call copies to C during its k-steps, so that
//! reading C's lines from memory overlaps the dot products; from 8 MiB of C on, the copy skips
//! that read with streaming stores ([`CStores`], [`Gemm::c_stores`]). Work is split over threads so that
//! each worker gets the same number of micro-tiles with the least A packing and B reading; each
//! worker computes up to four regions of C (full
//! micro-tiles, the right edge, the bottom edge, the corner), each under one configuration, so
//! a worker loads each configuration at most once per call, and not at all when it already
//! holds it (see [`RunStats`]; [`release_tiles`] gives the tile state back). When a worker's
//! part of C is a single micro-row (M <= 32, the bandwidth-bound inference shapes) nothing of B
//! is reused, so kc is all of K: C stays in the tiles and B streams front to back once.
//!
//! # Tile paths
//!
//! Full 32 x 32 micro-tiles, the common case, are configured through the typed tiles of
//! `tilecfg!`: the precision's 2x2 layout (`TypedTiles`, configured on the call's backend), whose
//! handles prove at compile time that every tile is configured and every dot product's operands
//! fit. On the emulator the instructions run through those typed tiles (or, by default, as one
//! block product per micro-kernel call); on the silicon they go straight to
//! `amx_runtime::intrinsics` (the inner loop is two TILELOADDs of A, two TILELOADDT1s of B and
//! four dot products, nothing else).
//! The edges run under their own configurations from a compile-time table: on the silicon each
//! instruction goes through `amx_runtime::intrinsics` (tile numbers in the encoding, no run-time
//! checks), the table being checked once against the kernel's operands, which is what makes that
//! sound. On the emulator the edges run as tile products on the packed operands (the tests
//! also run them through the runtime's checked methods), and on both paths every load and store is also checked against the bounds of its
//! buffer, so the test suite checks every address the silicon uses.
//!
//! # Speed on the silicon: what the caller controls
//!
//! - **Pack B once** ([`PackedB`]) and reuse it: [`Gemm::run_unpacked`] repacks it on every
//!   call, a pass over B that the product itself reads once more.
//! - **Align C to 64 bytes** (the output of [`Gemm::run_with`] too). The micro-kernel loads and
//!   stores C a tile row (64 bytes) at a time; a `Vec<i32>` from the global allocator is
//!   usually 16-byte aligned, so every row straddles two cache lines: measured on an Emerald
//!   Rapids-class core, about 12% of a 1024^3 product. A and B are copied into aligned blocks
//!   whatever their alignment.
//! - **Keep the threads** ([`Gemm::pool`] or the built-in pools): a worker that already holds
//!   its tile configuration loads none.
//!
//! # Numerics
//!
//! int8 results are exact (32-bit wraparound, as the silicon). bf16 results follow the tile
//! unit's rounding (per 32 elements of K: two f32 lanes of fused multiply-adds, then their sum
//! added to C; denormals flushed); [`reference`](mod@reference) states and derives the error
//! bound against an exact sum, about `(K / 32 + 16) * 2^-24 * sum |a||b|`. The FP8 products
//! (per 64 elements of K: the four exact products of each dword added in pairs, each pair
//! into one of two f32 lanes, then the lanes' sum added to C) meet the bound of the same
//! derivation with their own counts, about `(K / 64 + 17) * 2^-24 * sum |a||b|`.
//!
//! # Measuring
//!
//! The workspace's unpublished `amx-tools` package measures this crate against the machine's
//! roofs (`amx-bench`: the tile unit's peak, the read bandwidth, timed and checked runs),
//! through the public API only.

pub mod activation;
pub mod blob;
mod block_kernel;
mod blocking;
mod c_stores;
mod configs;
mod deferred;
pub mod epilogue;
mod error;
mod gemm;
mod kernel;
mod matrix;
pub mod pack;
mod pool;
mod precision;
pub mod quantize;
pub mod reference;
mod tile_ops;

pub use activation::Activation;
pub use blob::BlobError;
pub use blocking::Blocking;
pub use c_stores::CStores;
pub use epilogue::{Epilogue, Output, Residual, WeightScale};
pub use error::{EpilogueError, GemmError, InternalError, Operand, ThreadPoolError, Unsupported};
pub use gemm::{BatchStats, Gemm, Mode, RunStats, WorkerStats};
pub use half::{self, bf16, f16};
pub use matrix::{BLayout, BRef, Batch, MatMut, MatRef};
pub use pack::{PackedB, PackedBView};
pub use pool::release_tiles;
pub use precision::{
    Bf16, Bf8Bf8, Bf8Hf8, Fp16, Hf8Bf8, Hf8Hf8, Int8, ParsePrecisionError, Precision,
    PrecisionKind, Scalar, S8U8, U8S8, U8U8,
};

/// The FP8 values of A and B for the AMX-FP8 precisions ([`Bf8Bf8`] and the others).
pub use amx_runtime::fp8::{Bf8, Hf8};

/// The rayon this crate runs on, for [`Gemm::pool`]: a caller's pool must come from the same
/// major version.
pub use rayon;

/// The backend type of `amx-runtime`, for [`Gemm::backend`].
pub use amx_runtime::Backend;

/// The crate's README, whose examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
