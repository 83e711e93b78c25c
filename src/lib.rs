//! The workspace's root package: it holds the end-to-end tests (`tests/`), the examples
//! (`examples/`) and the README's code as doctests.
//!
//! This package is not published; it exists so that `tests/` and `examples/` at the top of the
//! repository use `amx-runtime` exactly as a user's crate would.

/// The README's Rust examples, compiled and run as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
