//! The rules of Intel AMX's tile configuration, written once.
//!
//! This crate is shared by the `tilecfg!` macro (which runs it at compile time) and by
//! `amx-runtime` (which runs it before every LDTILECFG), so a configuration the macro accepts is
//! exactly one the run-time check accepts, and both agree with the silicon.
//!
//! The data flow: a [`Palette`] table (architectural palette 1, or one decoded from CPUID leaf
//! 0x1D) and a 64-byte [`image`] go into [`validate()`], which reports every [`Violation`], each
//! naming its tile, field, byte offset, value and limit. Load-time violations are the ones
//! LDTILECFG answers with #GP; use-time violations are accepted by LDTILECFG but make every
//! TILELOADD/TILESTORED/TDP* on the tile raise #UD.
//!
//! ```
//! use amx_tilecfg::{image, validate, PaletteTable, TileShape};
//!
//! let mut shapes = [None; 8];
//! shapes[0] = Some(TileShape::new(16, 64));
//! shapes[3] = Some(TileShape::new(17, 64)); // one row too many
//! let bytes = image::encode(1, 0, &shapes);
//! let report = validate(&bytes, &PaletteTable::ARCHITECTURAL);
//! assert_eq!(report.len(), 1);
//! assert_eq!(
//!     report.iter().next().unwrap().to_string(),
//!     "tile t3 has 17 rows; palette 1 allows at most 16 (max_rows)"
//! );
//! ```
#![no_std]
// docs.rs builds with `--cfg docsrs` on nightly: label the items of the `serde` feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod decode;
pub mod image;
pub mod operands;
pub mod palette;
pub mod rules;
pub mod shape;
pub mod validate;

pub use operands::{check_dot, DotKind, DotMismatch, TmulLimits, DOT_ELEMENTS, ROW_ELEMENTS};
pub use palette::{Palette, PaletteTable};
pub use rules::{Field, NoSuchTile, Rule, RuleKind, Violation};
pub use shape::{ElemType, ParseElemTypeError, TileShape};
pub use validate::{validate, Report};

/// The crate's README, whose examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
