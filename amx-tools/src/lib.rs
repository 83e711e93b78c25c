//! Measuring tools for the Intel AMX crates (unpublished; `cargo install --path amx-tools`).
//!
//! Two programs, and the code they measure with:
//!
//! - `amx-info`: can this process use AMX here, and what does each instruction cost (on the
//!   silicon, the emulator and the trap engine)?
//! - `amx-bench`: `amx-gemm` against the roofs of the machine it runs on: the tile unit's peak
//!   and the memory bandwidth, measured in the same process ([`measure`]).
//!
//! The library crates stay free of benchmark harnesses: everything here is written against
//! their public API, as a user of them would.
//!
//! - [`measure`]: the GEMM harness (peak, bandwidth, timed and checked runs, their report);
//! - [`onednn`]: oneDNN's matmul loaded at run time, timed beside `amx-gemm` in one process;
//! - [`stats`]: the one median and spread of repeated measurements;
//! - [`timing`]: timing loops shared by the tools, the benches and the examples.
//!
//! Test data comes from `amx_test_support::random` (SplitMix64), the same streams the test
//! suites use.

pub mod measure;
pub mod onednn;
pub mod stats;
pub mod timing;

pub use measure::{Case, Harness, MeasureError, Peak, Report, Scaling};
pub use stats::{median, Sample};
