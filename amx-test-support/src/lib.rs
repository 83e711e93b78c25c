//! Shared support for the tests, benches and tools of the Intel AMX crates (unpublished).
//!
//! One copy of what every test suite needs: seeded test data ([`rng`]).

pub mod rng;

pub use rng::{random, splitmix, Random, SplitMix64};
