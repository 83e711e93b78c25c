//! Shared support for the tests, benches and tools of the Intel AMX crates (unpublished).
//!
//! One copy of what every test suite needs:
//!
//! - [`rng`]: seeded, reproducible test data ([`random`], [`SplitMix64`]);
//! - [`mod@skip`]: skips that `cargo test` shows, summed up per test binary at exit, and
//!   `AMX_REQUIRE_HARDWARE=1`, which makes a skip for want of hardware a failure;
//! - `needs` (feature `runtime`): the common skip conditions (the silicon code path, the trap
//!   engine, a CPU without AMX);
//! - [`child`]: one test run in a fresh child process;
//! - [`image`]: raw 64-byte tile-configuration images;
//! - `proptest_config` (feature `proptest`): a property's case count, unless `PROPTEST_CASES`
//!   sets it.

pub mod child;
pub mod image;
#[cfg(feature = "runtime")]
pub mod needs;
pub mod rng;
pub mod skip;

pub use child::{in_child, Child};
pub use image::TileImage;
pub use rng::{random, splitmix, Random, SplitMix64};
pub use skip::{skip, Kind};

/// proptest's configuration with `cases` cases per property, unless the `PROPTEST_CASES`
/// environment variable is set: then proptest's own reading of it (and of its other
/// `PROPTEST_*` variables) stands. A configuration written `ProptestConfig { cases: n, .. }` or
/// `ProptestConfig::with_cases(n)` would override the variable.
///
/// ```
/// use proptest::prelude::*;
///
/// proptest! {
///     #![proptest_config(ProptestConfig {
///         max_shrink_iters: 4096,
///         ..amx_test_support::proptest_config(512)
///     })]
///     // `#[test]` here in a test file.
///     fn addition_commutes(a in 0..100u32, b in 0..100u32) {
///         prop_assert_eq!(a + b, b + a);
///     }
/// }
/// addition_commutes();
/// ```
#[cfg(feature = "proptest")]
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let config = proptest::test_runner::Config::default();
    // An empty value counts as unset, as for a shell's `PROPTEST_CASES= cargo test`.
    if std::env::var_os("PROPTEST_CASES").is_some_and(|cases| !cases.is_empty()) {
        config
    } else {
        proptest::test_runner::Config { cases, ..config }
    }
}
