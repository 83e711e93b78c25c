//! Intel AMX from stable Rust.
//!
//! - [`tilecfg!`] checks a tile configuration at compile time and emits the aligned 64-byte
//!   image LDTILECFG reads, as a [`TileConfig`].
//! - [`detect()`] tells what the CPU and OS offer; the runtime asks Linux for permission to use
//!   tile data.
//! - [`TileUnit`] is the instruction set as a trait, implemented by the silicon ([`Hardware`])
//!   and by a bit-exact software [`Emulator`], so kernels run and are tested anywhere.
//!
//! ```
//! use amx_runtime::{tilecfg, Emulator, TileConfig, TileUnit};
//!
//! static GEMM: TileConfig = tilecfg! { palette 1; t0: 16x16 i32; t4: 16x64; t6: 16x64 };
//!
//! let mut unit = Emulator::new();
//! unit.ldtilecfg(GEMM.as_bytes()).unwrap();
//! assert_eq!(&unit.sttilecfg(), GEMM.as_bytes());
//! ```

// docs.rs builds with `--cfg docsrs` on nightly: label the items that exist on x86-64 only.
#![cfg_attr(docsrs, feature(doc_cfg))]

// Lets the macro's `::amx_runtime::` paths resolve inside this crate's own tests and docs.
extern crate self as amx_runtime;

mod backend;
pub mod block;
mod config;
pub mod context;
pub mod detect;
mod error;
#[cfg_attr(docsrs, doc(cfg(target_arch = "x86_64")))]
pub mod intrinsics;
pub mod peak;
pub mod permit;
pub mod trap;
pub mod typed;
mod unit;
pub mod vnni;

pub use amx_macros::tilecfg;
pub use amx_tilecfg as rules;
pub use amx_tilecfg::{ElemType, PaletteTable, TileShape, TmulLimits};
pub use backend::{backend, Backend, BackendChoice, BackendError};
pub use config::{TileConfig, TileConfigBuilder};
pub use context::{
    configure, configure_on, counters, release, release_on, set_thread_emulator, tmul_limits_on,
    ConfigureError, Counters, Requirement, Tiles, Unsupported,
};
pub use detect::{detect, Capabilities, Unavailable};
pub use error::{
    ConfigError, Fault, Feature, GeneralProtection, InvalidOpcode, Mnemonic, UdReason,
};
/// The `half` crate whose [`bf16`] and [`f16`](struct@f16) are the bf16 and fp16 values of
/// this crate's API: a caller's slices must come from the same major version.
pub use half;
pub use half::{bf16, f16};
/// The trait [`detect_with`](detect::detect_with) takes, and the result its reader returns,
/// from `raw-cpuid`: a CPUID dump replays without a dependency of its own. (Only these two are
/// re-exported: the whole crate would make names such as `Tile` ambiguous in rustc's messages,
/// which then print the typed tiles' types with full paths.)
pub use raw_cpuid::{CpuIdReader, CpuIdResult};
pub use typed::{configure_typed, configure_typed_on, TypedTiles};
pub use unit::{Emulator, Hardware, TileUnit, UnsupportedTable, ROW_BYTES, TILES, TILE_BYTES};

/// The crate's README, whose examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The README of `amx-macros`, whose examples need this crate to run.
#[cfg(doctest)]
#[doc = include_str!("../../amx-macros/README.md")]
struct MacrosReadmeDoctests;
