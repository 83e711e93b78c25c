//! Helpers shared by the integration tests: the backends to run on, and one checked GEMM.

#![allow(dead_code)] // Each test binary uses a different part.

use amx_gemm::reference::{verify, Outputs};
use amx_gemm::{Backend, Gemm, Mode, PackedB, Precision, Scalar};
use amx_test_support::{random, Kind};

/// The backends every correctness test runs on: the emulator always, the silicon code path
/// where it can run (the silicon, or the trap engine on x86-64 Linux without AMX; otherwise a
/// skip). Each backend runs a different tile path (the checked path on the emulator, the
/// unchecked intrinsics on the silicon): this is the "every kernel" ladder.
pub fn backends(test: &str) -> Vec<Backend> {
    let mut out = amx_test_support::needs::backends();
    // A trapped instruction costs a signal: the 1000^3 shapes would take a minute each; the
    // smaller shapes run the same kernels.
    if amx_trap::is_active() && test.starts_with("thousand_") {
        out.retain(|&backend| backend != Backend::Hardware);
        amx_test_support::skip(
            Kind::Hardware,
            "its hardware-backend part: 1000^3 GEMMs take minutes on the trap engine (a signal \
             per instruction); the smaller shapes run the same kernels there",
        );
    }
    out
}

/// A value C's padding is filled with, to detect stray writes.
pub fn canary<T: Scalar>() -> T {
    T::from_f64(-77.0)
}

/// One GEMM of `m x n x k` with random inputs (leading dimensions `k + pad`, `n + pad`), checked
/// against the reference over every output, and with C's padding checked untouched. Panics with
/// the shape on any failure.
#[allow(clippy::too_many_arguments)]
pub fn check<P: Precision>(
    backend: Backend,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    mode: Mode,
    pad: usize,
    seed: u64,
) where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let (lda, ldb, ldc) = (k + pad, n + pad, n + pad);
    let what = format!(
        "{} {m}x{n}x{k} threads {threads} {mode:?} pad {pad} on {backend}",
        P::KIND
    );
    let a: Vec<P::A> = random(m * lda, seed);
    let b: Vec<P::B> = random(k * ldb, seed + 1);
    let mut c0: Vec<P::C> = random(m * ldc, seed + 2);
    for i in 0..m {
        for j in n..ldc {
            c0[i * ldc + j] = canary();
        }
    }
    let packed = PackedB::<P>::pack(&b, k, n, ldb).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut c = c0.clone();
    let gemm = Gemm::new().threads(threads).mode(mode).backend(backend);
    let stats = gemm
        .run(m, &a, lda, &packed, &mut c, ldc)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(stats.backend, backend, "{what}");
    let start = (mode == Mode::Accumulate).then_some(&c0[..]);
    verify::<P>(m, n, k, &a, lda, &b, ldb, start, &c, ldc, Outputs::All)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    for i in 0..m {
        for j in n..ldc {
            assert_eq!(
                c[i * ldc + j],
                canary(),
                "{what}: C[{i}][{j}] past N was written"
            );
        }
    }
}
