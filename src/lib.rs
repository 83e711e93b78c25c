//! The workspace's root package: it holds the end-to-end tests (`tests/`) and the README's code
//! as doctests. (The examples in `examples/` are a package of their own, with only the
//! dependencies a user's program has.)
//!
//! This package is not published; it exists so that `tests/` at the top of the
//! repository use `amx-runtime` exactly as a user's crate would.

/// The README's Rust examples, compiled and run as doctests so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
