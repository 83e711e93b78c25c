//! Helpers shared by the workspace's end-to-end tests and examples.
//!
//! This package is not published; it exists so that `tests/` and `examples/` at the top of the
//! repository use `amx-runtime` exactly as a user's crate would.

/// Prints why a hardware test is skipped and returns `true` when the silicon is not usable here.
///
/// Tests that need real AMX call this first and return early when it says so, so the suite passes
/// (with a printed reason) on machines without AMX.
pub fn skip_without_hardware(test: &str) -> bool {
    match amx_runtime::Hardware::new() {
        Ok(_) => false,
        Err(reason) => {
            eprintln!("skipping {test}: {reason}");
            true
        }
    }
}

/// The README's Rust examples, compiled and run as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
