//! Helpers shared by the integration tests: the backends to run on, and one checked GEMM.

#![allow(dead_code)] // Each test binary uses a different part.

use amx_gemm::reference::{verify, Outputs};
use amx_gemm::{Backend, Gemm, Mode, PackedB, Precision, RunStats, Scalar};
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
    let what = format!(
        "{} {m}x{n}x{k} threads {threads} {mode:?} pad {pad} on {backend}",
        P::KIND
    );
    let gemm = Gemm::new().threads(threads).backend(backend);
    let stats = check_with::<P>(gemm, mode, (m, n, k), pad, None, seed, &what);
    assert_eq!(stats.backend, backend, "{what}");
}

/// `len` elements inside an owned buffer, starting `shift` elements past a 64-byte boundary.
pub struct Placed<T> {
    buf: Vec<T>,
    at: usize,
    len: usize,
}

impl<T: Copy + Default> Placed<T> {
    /// A copy of `init` placed so.
    pub fn new(init: &[T], shift: usize) -> Placed<T> {
        // A boundary lies within 64 elements of any start (elements are at least 1 byte).
        let mut buf = vec![T::default(); init.len() + 64 + shift];
        let at = buf.as_ptr().align_offset(64) + shift;
        buf[at..at + init.len()].copy_from_slice(init);
        Placed {
            buf,
            at,
            len: init.len(),
        }
    }

    /// The placed elements.
    pub fn get_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.at..self.at + self.len]
    }
}

/// [`check`] with the call's other options in `gemm` (threads, backend, C's stores...), the
/// leading dimensions `k + pad` and `n + pad`, and C placed `shift` elements past a 64-byte
/// boundary (`None`: where the allocator put it). Returns the call's statistics.
pub fn check_with<P: Precision>(
    gemm: Gemm,
    mode: Mode,
    (m, n, k): (usize, usize, usize),
    pad: usize,
    shift: Option<usize>,
    seed: u64,
    what: &str,
) -> RunStats
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let (lda, ldb, ldc) = (k + pad, n + pad, n + pad);
    let a: Vec<P::A> = random(m * lda, seed);
    let b: Vec<P::B> = random(k * ldb, seed + 1);
    let mut c0: Vec<P::C> = random(m * ldc, seed + 2);
    for i in 0..m {
        for j in n..ldc {
            c0[i * ldc + j] = canary();
        }
    }
    let packed = PackedB::<P>::pack(&b, k, n, ldb).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut placed = shift.map(|s| Placed::new(&c0, s));
    let mut plain = c0.clone();
    let c: &mut [P::C] = match &mut placed {
        Some(p) => p.get_mut(),
        None => &mut plain,
    };
    let stats = gemm
        .mode(mode)
        .run(m, &a, lda, &packed, c, ldc)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let start = (mode == Mode::Accumulate).then_some(&c0[..]);
    verify::<P>(m, n, k, &a, lda, &b, ldb, start, c, ldc, Outputs::All)
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
    stats
}
