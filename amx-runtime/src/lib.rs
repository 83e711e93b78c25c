//! Intel AMX from stable Rust: tile configurations checked at compile time, typed tiles whose
//! operand mismatches do not compile, and every tile instruction run either on the silicon or
//! on a bit-exact emulator, with every fault condition checked first (no safe input makes the
//! CPU raise #GP or #UD).
//!
//! | you want | here |
//! |---|---|
//! | a tile configuration (the 64 bytes LDTILECFG reads), checked when you compile | [`tilecfg!`] -> [`TileConfig`] |
//! | handles whose dot products compile only when the tiles fit | the item form of [`tilecfg!`], [`typed`] |
//! | B in the layout the dot products read | [`vnni::pack_b`] |
//! | to know whether AMX is usable here, and why not | [`detect()`], [`Capabilities::unavailable`] |
//! | the instructions, checked, on this thread | [`configure`] -> [`Tiles`] ([`TileUnit`]) |
//! | Intel's intrinsics, unchecked, to port C kernels | [`intrinsics`] |
//! | the silicon's code path on an x86-64 Linux CPU without AMX | the `amx-trap` crate, `AMX_BACKEND=trapped` |
//!
//! # `tilecfg!`: a configuration checked at compile time
//!
//! ```
//! use amx_runtime::{tilecfg, TileConfig};
//!
//! // rows x bytes per row, or rows x elements of a type (16x16 i32 = 16 rows of 64 bytes)
//! static GEMM: TileConfig = tilecfg! {
//!     palette 1;
//!     t0: 16x16 i32;
//!     t4: 16 x 64 i8;
//!     t6: 16x64;
//! };
//! assert_eq!(GEMM.as_bytes()[48], 16); // t0's rows
//! ```
//!
//! The grammar:
//!
//! ```text
//! tilecfg!  := `tilecfg!` ( `{` config `}` | `(` config `)` | `[` config `]` )
//! config    := layout? stmt ( `;` stmt )* `;`?  palette first; start_row and tiles in any order
//! layout    := attr* vis `struct` IDENT `;`      the item form: a layout type with typed handles
//! stmt      := doc* ( `palette` INT             required, first; 0 is INIT (nothing else allowed)
//!            | `start_row` INT                  optional, default 0 (not in a layout)
//!            | tile )                           a tile's doc comments document its handle
//! tile      := `t`DIGITS ( `as` IDENT )? `:` shape    `as IDENT` only in the item form
//! shape     := INT `x` INT elem?                `16x64`, `16 x 64`, `16x 64`, `16 x64`
//! elem      := `i8` | `u8` | `bf16` | `f16` | `i32` | `f32`
//! INT       := a decimal integer literal without suffix
//! ```
//!
//! A configuration the silicon would reject (#GP), or whose tiles would fault on use (#UD), is
//! a compile error on the offending token, naming the rule; every mistake of an input is
//! reported at once. The [`tilecfg!`] page lists the details.
//!
//! # The item form: typed tiles
//!
//! A leading `struct Name;` declares a layout type with one handle per named tile. A dot
//! product compiles only when its tiles fit the instruction, so it runs with no shape check.
//! The dot products read B in the VNNI layout ([`vnni`]), and strides count elements of the
//! slice given:
//!
//! ```
//! use amx_runtime::vnni::{pack_b, BMatrix};
//! use amx_runtime::{bf16, tilecfg};
//!
//! tilecfg! {
//!     /// C (16 x 16 f32) += A (16 x 32 bf16) x B (32 x 16 bf16).
//!     pub struct Bf16Block;
//!     palette 1;
//!     t0 as c: 16x16 f32;
//!     t1 as a: 16x32 bf16;
//!     t2 as b: 16x32 bf16;
//! }
//!
//! let small = |i: usize, m: usize| bf16::from_f32((i % m) as f32);
//! let a: Vec<bf16> = (0..16 * 32).map(|i| small(i, 5)).collect();
//! let b: Vec<bf16> = (0..32 * 16).map(|i| small(i, 3)).collect();
//! let shape = BMatrix::k_by_n(32, 16); // B row-major, 32 x 16
//! let mut b_tile = vec![bf16::ZERO; shape.image_len::<bf16>().unwrap()];
//! pack_b(&b, shape, &mut b_tile).unwrap();
//!
//! let mut c = [0f32; 16 * 16];
//! let mut tiles = Bf16Block::configure().unwrap(); // the silicon, else the emulator
//! tiles.zero(Bf16Block::c);
//! tiles.load(Bf16Block::a, &a, 32).unwrap();
//! tiles.load(Bf16Block::b, &b_tile, 32).unwrap();
//! tiles.tdpbf16ps(Bf16Block::c, Bf16Block::a, Bf16Block::b);
//! tiles.store(Bf16Block::c, &mut c, 16).unwrap();
//! let want: f32 = (0..32).map(|k| a[k].to_f32() * b[k * 16].to_f32()).sum();
//! assert_eq!(c[0], want); // small integers: exact in any order
//! ```
//!
//! # Where it runs
//!
//! [`configure`] runs on the process's [`backend()`]: the silicon when [`Hardware::new`]
//! succeeds, else the [`Emulator`] (`AMX_BACKEND=auto`, the default). `AMX_BACKEND=hardware`
//! insists on the silicon, `emulated` on the emulator, and `trapped` runs the silicon's code
//! path everywhere on x86-64 Linux: on a CPU without AMX the trap engine (the `amx-trap` crate,
//! registered in-process or preloaded) executes each instruction. The architectural behaviour both backends implement, statement by statement,
//! is [docs/semantics.md](https://github.com/amx-rs/amx-rs/blob/main/docs/semantics.md).
//!
//! ```
//! use amx_runtime::{tilecfg, Emulator, TileConfig, TileUnit};
//!
//! static CFG: TileConfig = tilecfg! { palette 1; t0: 16x16 i32; t4: 16x64; t6: 16x64 };
//!
//! let mut unit = Emulator::new(); // or Hardware::new()?, or configure(&CFG)? on the backend
//! unit.ldtilecfg(CFG.as_bytes()).unwrap();
//! assert_eq!(&unit.sttilecfg(), CFG.as_bytes());
//! assert!(unit.tilezero(1).is_err()); // t1 is unused: #UD on the silicon, an error here
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
#[doc(hidden)]
pub mod engine;
mod error;
pub mod fp8;
#[cfg_attr(docsrs, doc(cfg(target_arch = "x86_64")))]
pub mod intrinsics;
#[cfg(feature = "peak")]
#[cfg_attr(docsrs, doc(cfg(feature = "peak")))]
pub mod peak;
pub mod permit;
mod signal_scope;
mod thread_bound;
pub mod typed;
mod unit;
pub mod vnni;

pub use amx_macros::tilecfg;
pub use amx_tilecfg as rules;
pub use amx_tilecfg::{ElemType, Palette, PaletteTable, TileShape, TmulLimits};
pub use backend::{backend, Backend, BackendChoice, BackendError};
pub use config::{TileConfig, TileConfigBuilder};
pub use context::{
    configure, configure_on, counters, palette_table_on, release, release_on, set_thread_emulator,
    tmul_limits_on, ConfigureError, Counters, Requirement, Tiles, Unsupported,
};
pub use detect::{detect, Capabilities, Unavailable};
pub use error::{
    ConfigError, Fault, Feature, GeneralProtection, InvalidOpcode, Mnemonic, UdReason,
};
pub use fp8::{Bf8, Hf8};
/// The `half` crate whose [`bf16`] and [`f16`](struct@f16) are the bf16 and fp16 values of
/// this crate's API: a caller's slices must come from the same major version.
pub use half;
pub use half::{bf16, f16};
/// The trait [`detect_with`](detect::detect_with) takes, and the result its reader returns,
/// from `raw-cpuid`: a CPUID dump replays without a dependency of its own. (Only these two are
/// re-exported: the whole crate would make names such as `Tile` ambiguous in rustc's messages,
/// which then print the typed tiles' types with full paths.)
pub use raw_cpuid::{CpuIdReader, CpuIdResult};
pub use signal_scope::{signal_scope, SignalScope};
pub use typed::{configure_typed, configure_typed_on, TypedTiles};
pub use unit::numerics::KernelPath;
pub use unit::{Emulator, Hardware, TileUnit, UnsupportedTable, ROW_BYTES, TILES, TILE_BYTES};

/// The crate's README, whose examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
