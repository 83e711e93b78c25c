//! Property tests (proptest) of the public API with random, degenerate and huge arguments, on
//! the emulated backend. The rule under test: no input panics, bad input is a typed error, and
//! nothing is lost.
//!
//! - **What is driven**: [`PackedB::pack`], [`PackedB::pack_transposed`], [`PackedB::get`],
//!   [`Gemm::run`] and [`Gemm::run_unpacked`] (random thread counts, modes and blockings),
//!   [`reference::gemm`] and [`reference::verify`], with dimensions 0, at the tile edges,
//!   medium, and near `usize::MAX`; leading dimensions 0, one short of the row, exact, wider,
//!   and huge; slices empty, short, exactly long enough, and longer; thread counts 0, 1..3 and
//!   above [`Gemm::MAX_THREADS`]; blockings with fields 0, not multiples of the tile, and
//!   `usize::MAX`; values at the integer extremes and, for bf16, NaN, infinities, denormals and
//!   the largest finite values (C too, in both modes).
//! - **What is asserted**: no call panics (each runs under `catch_unwind`); bad arguments give
//!   exactly the error of the first failing check, in the documented order, and leave C as it
//!   was; `Ok` results equal a plain loop written here (int8, u8s8: exactly, with 32-bit
//!   wraparound) or, for bf16, match it by the rules of [`reference`]'s docs (denormal inputs
//!   read as zero; NaN for NaN, the same infinity for an infinity, non-finite outputs only
//!   where an intermediate sum may overflow, finite outputs within
//!   [`reference::bf16_tolerance`]); [`reference::verify`] passes both the GEMM's result and
//!   the reference's own; no element of C outside the `m x n` window changes; the blocking
//!   never changes the result, bit for bit; `run_unpacked` equals `run` on the packed B, and
//!   the transposed packing equals the plain one.
//! - **bf16 verification**: targeted tests and a property with products around `2^-126` (where
//!   the tiles flush at every step), denormal inputs and starts, infinities, NaN and overflow
//!   check that `verify` passes the emulated result and rejects it with any finite output
//!   moved by four tolerances, or with a NaN or infinity of the wrong class.
//! - **Memory**: every allocation of this test binary goes through [`Limited`], which refuses
//!   any single request above 64 MiB (a fallible allocation in the crate then sees an error; an
//!   infallible one aborts the run), and the targeted tests check that huge dimensions are
//!   refused before any large allocation.
//!
//! The default case counts keep this file to a few seconds in debug builds. Set
//! `PROPTEST_CASES=N` to run N cases of every property (e.g. `PROPTEST_CASES=20000` for a long
//! run).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use amx_gemm::reference::{self, Outputs, VerifyError};
use amx_gemm::{
    bf16, release_tiles, Backend, Bf16, Blocking, Gemm, GemmError, Int8, Mode, Operand, PackedB,
    Precision, PrecisionKind, Scalar, U8S8,
};
use amx_gemm::{BRef, MatMut, MatRef};
use amx_test_support::{random, splitmix};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Bounded allocation
// ---------------------------------------------------------------------------------------------

/// The largest single allocation this test binary allows.
const ALLOC_LIMIT: usize = 64 << 20;

/// The system allocator, refusing any single request above [`ALLOC_LIMIT`] and recording, per
/// thread, the largest request seen.
struct Limited;

thread_local! {
    /// The largest allocation request of this thread since the last [`largest_allocation`].
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the thread's storage may already be gone while the thread exits.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, or returns
// null (an allowed answer: allocation failure) without touching memory.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through this allocator) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        if new_size > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` was allocated by `System` with `layout`; the rest is the caller's
        // contract for `realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;

/// Runs `f` and returns its value and the largest single allocation the calling thread asked
/// for meanwhile.
fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|l| l.set(0));
    let r = f();
    (r, LARGEST.with(Cell::get))
}

// ---------------------------------------------------------------------------------------------
// Configuration, generators
// ---------------------------------------------------------------------------------------------

/// `default` cases per property unless `PROPTEST_CASES` is set.
fn config(default: u32) -> ProptestConfig {
    ProptestConfig {
        max_shrink_iters: 2048,
        ..amx_test_support::proptest_config(default)
    }
}

/// The longest slice a case builds, in elements (1 MiB of i32 or f32).
const MAX_LEN: usize = 1 << 18;

/// Sizes near the top of `usize`, where products overflow.
const HUGE: [usize; 7] = [
    usize::MAX,
    usize::MAX - 1,
    usize::MAX / 2,
    usize::MAX / 16,
    usize::MAX / 64 + 1,
    isize::MAX as usize,
    1 << 40,
];

/// A dimension up to 70: mostly anything, often a tile edge.
fn small_dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        5 => 0..=40usize,
        3 => prop::sample::select(vec![0usize, 1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 70]),
    ]
}

/// The one dimension of a case that may be large: medium (products stay cheap, the other two
/// are small) or huge.
fn big_dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => 100..=1200usize,
        2 => prop::sample::select(HUGE.to_vec()),
    ]
}

/// `(m, n, k)`: all small, or one of them big.
fn dims() -> impl Strategy<Value = (usize, usize, usize)> {
    (0..6u8, small_dim(), small_dim(), small_dim(), big_dim()).prop_map(|(which, m, n, k, big)| {
        match which {
            0 => (big, n, k),
            1 => (m, big, k),
            2 => (m, n, big),
            _ => (m, n, k),
        }
    })
}

/// A leading dimension relative to the row length it must hold.
#[derive(Clone, Copy, Debug)]
enum Ld {
    Exact,
    Plus(usize),
    Minus(usize),
    Zero,
    Wide(usize),
    Huge(usize),
}

fn ld() -> impl Strategy<Value = Ld> {
    prop_oneof![
        4 => Just(Ld::Exact),
        3 => (1..40usize).prop_map(Ld::Plus),
        1 => (1..3usize).prop_map(Ld::Minus),
        1 => Just(Ld::Zero),
        1 => (1000..20_000usize).prop_map(Ld::Wide),
        1 => prop::sample::select(HUGE.to_vec()).prop_map(Ld::Huge),
    ]
}

fn resolve_ld(ld: Ld, cols: usize) -> usize {
    match ld {
        Ld::Exact => cols,
        Ld::Plus(d) => cols.saturating_add(d),
        Ld::Minus(d) => cols.saturating_sub(d),
        Ld::Zero => 0,
        Ld::Wide(w) => cols.saturating_add(w),
        Ld::Huge(h) => h,
    }
}

/// A slice length relative to what the shape needs.
#[derive(Clone, Copy, Debug)]
enum Len {
    Exact,
    Short(usize),
    Long(usize),
    Empty,
    Any(usize),
}

fn len() -> impl Strategy<Value = Len> {
    prop_oneof![
        8 => Just(Len::Exact),
        2 => (1..4usize).prop_map(Len::Short),
        2 => (1..70usize).prop_map(Len::Long),
        1 => Just(Len::Empty),
        1 => (0..5000usize).prop_map(Len::Any),
    ]
}

/// The elements a `rows x cols` matrix with leading dimension `ld` needs, by the documented
/// rule (written out here, independently of the crate): none when it is empty, else
/// `(rows - 1) * ld + cols` with `ld >= cols`; `None` when that is not a size.
fn needed(rows: usize, cols: usize, ld: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    if ld < cols {
        return None;
    }
    (rows - 1).checked_mul(ld)?.checked_add(cols)
}

fn resolve_len(len: Len, rows: usize, cols: usize, ld: usize) -> usize {
    // When the shape needs more than a case may allocate, "exact" is some short length.
    let base = needed(rows, cols, ld)
        .filter(|&n| n <= MAX_LEN)
        .unwrap_or_else(|| rows.saturating_mul(cols).min(4096));
    let len = match len {
        Len::Exact => base,
        Len::Short(d) => base.saturating_sub(d),
        Len::Long(d) => base.saturating_add(d),
        Len::Empty => 0,
        Len::Any(x) => x,
    };
    len.min(MAX_LEN)
}

/// The error the documented checks give for one operand, or `None` when it passes.
fn expected_error(
    operand: Operand,
    rows: usize,
    cols: usize,
    ld: usize,
    len: usize,
) -> Option<GemmError> {
    if rows == 0 || cols == 0 {
        return None;
    }
    if ld < cols {
        return Some(GemmError::LeadingDimension { operand, ld, cols });
    }
    match (rows - 1).checked_mul(ld).and_then(|x| x.checked_add(cols)) {
        None => Some(GemmError::TooLarge { operand }),
        Some(needed) if needed > len => Some(GemmError::SliceTooShort {
            operand,
            needed,
            len,
        }),
        Some(_) => None,
    }
}

fn threads() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => Just(1usize),
        2 => Just(2),
        1 => Just(3),
        1 => Just(0),
        1 => prop::sample::select(vec![
            Gemm::MAX_THREADS + 1,
            100_000,
            usize::MAX,
        ]),
    ]
}

fn blocking() -> impl Strategy<Value = Blocking> {
    let any = (
        prop::sample::select(vec![
            0usize,
            1,
            31,
            32,
            33,
            64,
            2048,
            usize::MAX - 5,
            usize::MAX,
        ]),
        prop::sample::select(vec![0usize, 1, 2, 3, 8, usize::MAX]),
        prop::sample::select(vec![
            0usize,
            1,
            31,
            32,
            33,
            256,
            usize::MAX - 40,
            usize::MAX,
        ]),
        prop::sample::select(vec![0usize, 1, 4, 1 << 20, usize::MAX]),
    )
        .prop_map(|(nc, kc_steps, mc, prefetch_steps)| Blocking {
            nc,
            kc_steps,
            mc,
            prefetch_steps,
        });
    prop_oneof![2 => Just(Blocking::DEFAULT), 3 => any]
}

/// Which values fill the inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    /// `amx_test_support::random`: integers over their range, bf16 in [-1, 1) (no denormals).
    Plain,
    /// A third of the elements at the extremes: integer minimum and maximum, bf16 NaN,
    /// infinities, denormals, the largest finite values, signed zeros.
    Extreme,
}

/// `len` elements from `seed` of the flavor.
fn values<T: Scalar + amx_test_support::Random>(len: usize, seed: u64, flavor: Flavor) -> Vec<T> {
    const SPECIAL: [f64; 11] = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e300,
        -1e300,
        0.0,
        -0.0,
        1e-40,
        3.0e38,
        -3.0e38,
        1.0,
    ];
    let mut v: Vec<T> = random(len, seed);
    if flavor == Flavor::Extreme {
        let mut s = seed ^ 0x5EED;
        for x in &mut v {
            s = splitmix(s);
            if s.is_multiple_of(3) {
                *x = T::from_f64(SPECIAL[(s >> 8) as usize % SPECIAL.len()]);
            }
        }
    }
    v
}

/// One GEMM call's arguments, resolved.
#[derive(Clone, Debug)]
struct Args {
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    ldc: usize,
    a_len: usize,
    b_len: usize,
    c_len: usize,
    threads: usize,
    mode: Mode,
    blocking: Blocking,
    flavor: Flavor,
    seed: u64,
}

/// `ld` and `len` choices, and in 40% of the cases the bad ones (a leading dimension smaller
/// than the row, a short slice) replaced by good ones, so that about half the cases compute.
fn args() -> impl Strategy<Value = Args> {
    let tidy = |good: bool, (ld, len): (Ld, Len)| match good {
        false => (ld, len),
        true => (
            match ld {
                Ld::Minus(_) | Ld::Zero => Ld::Exact,
                ld => ld,
            },
            match len {
                Len::Short(_) | Len::Empty | Len::Any(_) => Len::Exact,
                len => len,
            },
        ),
    };
    let choices = (
        prop::bool::weighted(0.4),
        [(ld(), len()), (ld(), len()), (ld(), len())],
    )
        .prop_map(move |(good, [a, b, c])| {
            let [a, b, c] = [tidy(good, a), tidy(good, b), tidy(good, c)];
            ([a.0, b.0, c.0], [a.1, b.1, c.1])
        });
    let shape = (dims(), choices).prop_map(|(dims, (lds, lens))| (dims, lds, lens));
    let options = (
        threads(),
        prop_oneof![Just(Mode::Overwrite), Just(Mode::Accumulate)],
        blocking(),
        prop_oneof![3 => Just(Flavor::Plain), 1 => Just(Flavor::Extreme)],
        any::<u64>(),
    );
    (shape, options).prop_map(
        |(((m, n, k), [la, lb, lc], [na, nb, nc]), (threads, mode, blocking, flavor, seed))| {
            let (lda, ldb, ldc) = (resolve_ld(la, k), resolve_ld(lb, n), resolve_ld(lc, n));
            Args {
                m,
                n,
                k,
                lda,
                ldb,
                ldc,
                a_len: resolve_len(na, m, k, lda),
                b_len: resolve_len(nb, k, n, ldb),
                c_len: resolve_len(nc, m, n, ldc),
                threads,
                mode,
                blocking,
                flavor,
                seed,
            }
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// Runs `f`; a panic fails the test naming the call.
fn no_panic<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => panic!("{what} panicked (see the message above)"),
    }
}

/// The same value, bit for bit (NaN payloads aside).
fn same<T: Scalar>(x: T, y: T) -> bool {
    let (x, y) = (x.to_f64(), y.to_f64());
    x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
}

fn same_all<T: Scalar>(x: &[T], y: &[T]) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(*a, *b))
}

/// Whether element `idx` of C lies in the `m x n` window.
fn in_window(idx: usize, m: usize, n: usize, ldc: usize) -> bool {
    m > 0 && n > 0 && ldc > 0 && idx / ldc < m && idx % ldc < n
}

/// The elements of a computed C as they must be, next to `c0` (C before the call): the window
/// checked against a plain loop, everything else unchanged.
#[allow(clippy::too_many_arguments)]
fn check_product<P: Precision>(
    what: &str,
    t: &Args,
    a: &[P::A],
    b: &[P::B],
    c0: &[P::C],
    c: &[P::C],
) where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let (m, n, k, lda, ldb, ldc) = (t.m, t.n, t.k, t.lda, t.ldb, t.ldc);
    assert_eq!(c.len(), c0.len());
    for (idx, (x, y)) in c0.iter().zip(c).enumerate() {
        if !in_window(idx, m, n, ldc) {
            assert!(
                same(*x, *y),
                "{what}: C[{idx}] outside the window changed: {t:?}"
            );
        }
    }
    if m == 0 || n == 0 {
        return;
    }
    let accumulate = t.mode == Mode::Accumulate;
    for i in 0..m {
        for j in 0..n {
            let got = c[i * ldc + j].to_f64();
            let start = if accumulate {
                c0[i * ldc + j].to_f64()
            } else {
                0.0
            };
            match P::KIND.is_integer() {
                false => {
                    let plain = plain_bf16(
                        start,
                        (0..k).map(|kk| (a[i * lda + kk].to_f64(), b[kk * ldb + j].to_f64())),
                    );
                    assert!(
                        bf16_output_ok(got, &plain, k),
                        "{what}: C[{i}][{j}] = {got}, reference {plain:?}: {t:?}"
                    );
                }
                true => {
                    let mut sum = start as i64;
                    for kk in 0..k {
                        sum += a[i * lda + kk].to_f64() as i64 * b[kk * ldb + j].to_f64() as i64;
                    }
                    assert_eq!(
                        got,
                        f64::from(sum as i32),
                        "{what}: C[{i}][{j}] (wrapped to i32): {t:?}"
                    );
                }
            }
        }
    }
}

/// The smallest normal f32 and bf16, `2^-126`: the tiles read a denormal input as zero and
/// flush a result below it to zero (docs/semantics.md section 10).
const MIN_NORMAL: f64 = f32::MIN_POSITIVE as f64;

/// f32's overflow threshold `2^128 - 2^103`: an exact value at least this large rounds to
/// infinity.
const OVERFLOW: f64 = 2.0 * (1u128 << 127) as f64 - (1u128 << 103) as f64;

/// DAZ as the tiles apply it: a denormal becomes a zero of its sign.
fn daz(x: f64) -> f64 {
    if x != 0.0 && x.abs() < MIN_NORMAL {
        0f64.copysign(x)
    } else {
        x
    }
}

/// One bf16 output computed plainly in `f64` from the values the tiles see.
#[derive(Debug)]
struct Plain {
    /// `c0 + sum a_k b_k`.
    sum: f64,
    /// `|c0| + sum |a_k b_k|` (what [`reference::bf16_tolerance`] takes).
    magnitude: f64,
    /// The same over the finite terms only: how large an intermediate sum can grow.
    finite: f64,
}

/// `start + sum a b` over `pairs` with the tiles' DAZ: on every input, and on the start when
/// there is at least one product (with K = 0 no dot product runs and C stays as it is).
fn plain_bf16(start: f64, pairs: impl Iterator<Item = (f64, f64)>) -> Plain {
    let mut pairs = pairs.peekable();
    let start = if pairs.peek().is_some() {
        daz(start)
    } else {
        start
    };
    let mut p = Plain {
        sum: start,
        magnitude: start.abs(),
        finite: if start.is_finite() { start.abs() } else { 0.0 },
    };
    for (x, y) in pairs {
        let product = daz(x) * daz(y);
        p.sum += product;
        p.magnitude += product.abs();
        if product.is_finite() {
            p.finite += product.abs();
        }
    }
    p
}

/// Whether `got` is a right bf16 output for `plain` over `k` products, by the rules of
/// `reference`'s docs written out here. An intermediate sum can overflow only when the finite
/// terms, grown by the `ceil(k / 32) + 16` roundings a term passes through at most, reach f32's
/// overflow threshold; then a finite exact sum may come out infinite or NaN, and an infinite
/// one NaN (`+inf` in one lane, `-inf` in the other). Every finite output is held to the bound.
fn bf16_output_ok(got: f64, plain: &Plain, k: usize) -> bool {
    let h = (k.div_ceil(32) + 16).min(1 << 30) as i32;
    let may_overflow = plain.finite * (1.0 + 2f64.powi(-24)).powi(h) >= OVERFLOW;
    if plain.sum.is_nan() {
        got.is_nan()
    } else if plain.sum.is_infinite() {
        got == plain.sum || (got.is_nan() && may_overflow)
    } else if !got.is_finite() {
        may_overflow
    } else {
        (got - plain.sum).abs() <= reference::bf16_tolerance(k, plain.magnitude)
    }
}

/// Whether a `k x n` matrix is small enough to visit every cell (and every row: `k x 0` with a
/// huge `k` is not).
fn few_cells(k: usize, n: usize) -> bool {
    k <= 1 << 14 && n <= 1 << 14 && k * n <= 1 << 14
}

/// `get` reads back every element of B (when there are few) and `None` outside it.
fn check_get<P: Precision>(t: &str, p: &PackedB<P>, b: &[P::B], k: usize, n: usize, ldb: usize)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    assert_eq!((p.k(), p.n()), (k, n), "{t}");
    for (kk, nn) in [(k, 0), (0, n), (k, n), (usize::MAX, 0), (0, usize::MAX)] {
        assert_eq!(p.get(kk, nn), None, "{t}: get({kk}, {nn})");
    }
    if few_cells(k, n) {
        for kk in 0..k {
            for nn in 0..n {
                let got = p.get(kk, nn).expect("inside B");
                assert!(same(got, b[kk * ldb + nn]), "{t}: get({kk}, {nn})");
            }
        }
    } else if k > 0 && n > 0 {
        let got = p.get(k - 1, n - 1).expect("inside B");
        assert!(same(got, b[(k - 1) * ldb + n - 1]), "{t}: get(last)");
    }
}

/// `r` is the expected error, or `Ok` when none is expected; on an error C is unchanged.
fn check_outcome<T: std::fmt::Debug, C: Scalar>(
    what: &str,
    t: &Args,
    r: &Result<T, GemmError>,
    want: &Option<GemmError>,
    c0: &[C],
    c: &[C],
) {
    match (r, want) {
        (Ok(_), None) => {}
        (Err(e), Some(w)) => {
            assert_eq!(e, w, "{what}: {t:?}");
            assert!(!e.to_string().is_empty());
            assert!(
                same_all(c0, c),
                "{what}: C changed by a refused call: {t:?}"
            );
        }
        (r, w) => panic!("{what}: got {r:?}, expected {w:?}: {t:?}"),
    }
}

/// The whole API on one set of arguments.
fn gemm_property<P: Precision>(t: &Args)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let (m, n, k) = (t.m, t.n, t.k);
    let a: Vec<P::A> = values(t.a_len, t.seed, t.flavor);
    let b: Vec<P::B> = values(t.b_len, t.seed ^ 1, t.flavor);
    // Overwrite: C's old contents are garbage that must not matter.
    let c_flavor = match t.mode {
        Mode::Overwrite => Flavor::Extreme,
        Mode::Accumulate => t.flavor,
    };
    let c0: Vec<P::C> = values(t.c_len, t.seed ^ 2, c_flavor);
    let gemm = Gemm::new()
        .threads(t.threads)
        .backend(Backend::Emulated)
        .mode(t.mode)
        .blocking(t.blocking);

    let err_a = expected_error(Operand::A, m, k, t.lda, t.a_len);
    let err_b = expected_error(Operand::B, k, n, t.ldb, t.b_len);
    let err_c = expected_error(Operand::C, m, n, t.ldc, t.c_len);
    let err_threads = (t.threads > Gemm::MAX_THREADS).then_some(GemmError::TooManyThreads {
        requested: t.threads,
        max: Gemm::MAX_THREADS,
    });

    // Packing.
    let packed = no_panic("pack", || PackedB::<P>::pack(&b, k, n, t.ldb));
    check_outcome("pack", t, &packed, &err_b, &c0, &c0);
    let mut computed: Option<Vec<P::C>> = None;
    if let Ok(packed) = &packed {
        check_get("pack", packed, &b, k, n, t.ldb);

        // Gemm::run: A, C, then the thread count.
        let mut c = c0.clone();
        let r = no_panic("run", || gemm.run(m, &a, t.lda, packed, &mut c, t.ldc));
        let want = err_a.clone().or(err_c.clone()).or(err_threads.clone());
        check_outcome("run", t, &r, &want, &c0, &c);
        if let Ok(stats) = &r {
            assert_eq!(stats.backend, Backend::Emulated);
            assert_eq!(stats.threads, gemm.thread_count());
            assert!(stats.workers.len() <= stats.threads);
            check_product::<P>("run", t, &a, &b, &c0, &c);
            // The blocking changes nothing, bit for bit.
            if t.blocking != Blocking::DEFAULT {
                let mut d = c0.clone();
                no_panic("run (default blocking)", || {
                    gemm.clone()
                        .blocking(Blocking::DEFAULT)
                        .run(m, &a, t.lda, packed, &mut d, t.ldc)
                })
                .expect("the same call with the default blocking");
                assert!(same_all(&c, &d), "blocking changed the result: {t:?}");
            }
            computed = Some(c);
        }
    }

    // Gemm::run_unpacked: A, C, the thread count, then B.
    let mut c = c0.clone();
    let r = no_panic("run_unpacked", || {
        gemm.run_unpacked::<P>(
            MatRef::new(&a, m, k).with_ld(t.lda),
            BRef::k_by_n(&b, k, n).with_ld(t.ldb),
            MatMut::new(&mut c, m, n).with_ld(t.ldc),
        )
    });
    let want = err_a
        .clone()
        .or(err_c.clone())
        .or(err_threads.clone())
        .or(err_b.clone());
    check_outcome("run_unpacked", t, &r, &want, &c0, &c);
    if r.is_ok() {
        match &computed {
            Some(d) => assert!(same_all(&c, d), "run_unpacked differs from run: {t:?}"),
            None => check_product::<P>("run_unpacked", t, &a, &b, &c0, &c),
        }
        computed = Some(c);
    }

    // reference::gemm: A, B, then C.
    let mut c = c0.clone();
    let r = no_panic("reference::gemm", || {
        reference::gemm::<P>(m, n, k, &a, t.lda, &b, t.ldb, &mut c, t.ldc, t.mode)
    });
    let want = err_a.clone().or(err_b.clone()).or(err_c.clone());
    check_outcome("reference::gemm", t, &r, &want, &c0, &c);
    let mut referenced: Option<Vec<P::C>> = None;
    if r.is_ok() {
        if P::KIND == PrecisionKind::Bf16 {
            check_product::<P>("reference::gemm", t, &a, &b, &c0, &c);
        } else if let Some(d) = &computed {
            assert!(same_all(&c, d), "reference::gemm differs from run: {t:?}");
        } else {
            check_product::<P>("reference::gemm", t, &a, &b, &c0, &c);
        }
        referenced = Some(c);
    }

    // reference::verify: A, B, C, then C's start (checked as C). Both the GEMM's result and
    // the reference's own are right products (checked above), so `verify` must pass each.
    let start = (t.mode == Mode::Accumulate).then_some(&c0[..]);
    let sample = if t.seed.is_multiple_of(4) {
        Outputs::Sampled((t.seed >> 8) as usize % 50)
    } else {
        Outputs::All
    };
    let want = err_a.or(err_b).or(err_c);
    let results: Vec<(&str, &[P::C])> = match (&computed, &referenced) {
        (None, None) => vec![("C's start", &c0)],
        (computed, referenced) => [("the GEMM's", computed), ("the reference's", referenced)]
            .into_iter()
            .filter_map(|(name, c)| Some((name, c.as_deref()?)))
            .collect(),
    };
    for (name, result) in results {
        let r = no_panic("reference::verify", || {
            reference::verify::<P>(m, n, k, &a, t.lda, &b, t.ldb, start, result, t.ldc, sample)
        });
        match (&r, &want) {
            (Err(VerifyError::Input(e)), Some(w)) => assert_eq!(e, w, "verify: {t:?}"),
            (_, Some(w)) => panic!("verify: got {r:?}, expected {w:?}: {t:?}"),
            (Ok(v), None) => assert!(v.checked <= v.total),
            (Err(e), None) => panic!("verify rejects {name} result: {e}: {t:?}"),
        }
    }
}

/// Packing a B and its transpose: the documented errors, and the same packed B.
fn pack_property<P: Precision>(
    (k, n): (usize, usize),
    (ldb, ldbt): (usize, usize),
    (b_len, bt_len): (usize, usize),
    flavor: Flavor,
    seed: u64,
) where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let t = format!("k {k} n {n} ldb {ldb} ({b_len}) ldbt {ldbt} ({bt_len})");
    let b: Vec<P::B> = values(b_len, seed, flavor);
    let mut bt: Vec<P::B> = values(bt_len, seed ^ 1, flavor);
    let small = few_cells(k, n);
    if small && needed(k, n, ldb).is_some_and(|x| x <= b_len) {
        for kk in 0..k {
            for nn in 0..n {
                if let Some(x) = nn.checked_mul(ldbt).and_then(|x| x.checked_add(kk)) {
                    if x < bt_len {
                        bt[x] = b[kk * ldb + nn];
                    }
                }
            }
        }
    }
    let (p, largest) = largest_allocation(|| no_panic(&t, || PackedB::<P>::pack(&b, k, n, ldb)));
    let want = expected_error(Operand::B, k, n, ldb, b_len);
    match (&p, &want) {
        (Ok(p), None) => {
            check_get(&t, p, &b, k, n, ldb);
            assert!(
                largest <= p.packed_bytes().max(1 << 12),
                "{t}: allocated {largest}"
            );
        }
        (Err(e), Some(w)) => {
            assert_eq!(e, w, "{t}");
            assert!(
                largest < 1 << 16,
                "{t}: allocated {largest} before refusing"
            );
        }
        _ => panic!("{t}: pack gave {p:?}, expected {want:?}"),
    }
    let q = no_panic(&t, || PackedB::<P>::pack_transposed(&bt, k, n, ldbt));
    let want_t = expected_error(Operand::B, n, k, ldbt, bt_len);
    match (&q, &want_t) {
        (Ok(q), None) => {
            assert_eq!((q.k(), q.n()), (k, n), "{t}");
            if let (Ok(p), true) = (&p, small) {
                assert_eq!(p.packed_bytes(), q.packed_bytes(), "{t}");
                for kk in 0..k {
                    for nn in 0..n {
                        let (x, y) = (p.get(kk, nn).unwrap(), q.get(kk, nn).unwrap());
                        assert!(same(x, y), "{t}: transposed ({kk}, {nn})");
                    }
                }
            }
        }
        (Err(e), Some(w)) => assert_eq!(e, w, "{t} (transposed)"),
        _ => panic!("{t}: pack_transposed gave {q:?}, expected {want_t:?}"),
    }
}

/// `(k, n)`, `(ldb, ldbt)`, `(b_len, bt_len)`, the values' flavor and seed.
type PackArgs = ((usize, usize), (usize, usize), (usize, usize), Flavor, u64);

fn pack_args() -> impl Strategy<Value = PackArgs> {
    (
        dims(),
        ld(),
        ld(),
        len(),
        len(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|((_, n, k), lb, lbt, nb, nbt, extreme, seed)| {
            let (ldb, ldbt) = (resolve_ld(lb, n), resolve_ld(lbt, k));
            let flavor = if extreme {
                Flavor::Extreme
            } else {
                Flavor::Plain
            };
            (
                (k, n),
                (ldb, ldbt),
                (resolve_len(nb, k, n, ldb), resolve_len(nbt, n, k, ldbt)),
                flavor,
                seed,
            )
        })
}

proptest! {
    #![proptest_config(config(192))]

    #[test]
    fn fuzz_int8(t in args()) {
        gemm_property::<Int8>(&t);
    }

    #[test]
    fn fuzz_u8s8(t in args()) {
        gemm_property::<U8S8>(&t);
    }

    #[test]
    fn fuzz_bf16(t in args()) {
        gemm_property::<Bf16>(&t);
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn fuzz_pack_int8((kn, ld, len, flavor, seed) in pack_args()) {
        pack_property::<Int8>(kn, ld, len, flavor, seed);
    }

    #[test]
    fn fuzz_pack_bf16((kn, ld, len, flavor, seed) in pack_args()) {
        pack_property::<Bf16>(kn, ld, len, flavor, seed);
    }
}

// ---------------------------------------------------------------------------------------------
// Targeted cases
// ---------------------------------------------------------------------------------------------

fn emulated() -> Gemm {
    Gemm::new().threads(1).backend(Backend::Emulated)
}

/// M, N or K of 0 with empty slices and any leading dimensions, through every call: `Ok`,
/// K = 0 zeroing C (overwrite) or leaving it (accumulate), and no time spent on the other,
/// possibly huge, dimensions.
#[test]
fn zero_dimensions() {
    for ld in [0, 1, 7, usize::MAX] {
        for big in [0, 5, 1 << 40, usize::MAX] {
            // B empty whatever ldb and the other dimension are.
            for (k, n) in [(0, big), (big, 0)] {
                let p = PackedB::<Int8>::pack(&[], k, n, ld).unwrap();
                assert_eq!((p.k(), p.n(), p.packed_bytes()), (k, n, 0));
                let q = PackedB::<Bf16>::pack_transposed(&[], k, n, ld).unwrap();
                assert_eq!(q.packed_bytes(), 0);
            }
            // M = 0 or N = 0: nothing to compute.
            let mut c: Vec<i32> = vec![];
            let p = PackedB::<Int8>::pack(&[], big, 0, ld).unwrap();
            emulated().run(0, &[], ld, &p, &mut c, ld).unwrap();
            let empty = PackedB::<Int8>::pack(&[], 0, 0, ld).unwrap();
            emulated().run(big, &[], 0, &empty, &mut c, ld).unwrap();
            emulated()
                .run_unpacked::<Int8>(
                    MatRef::new(&[], big, 0).with_ld(ld),
                    BRef::k_by_n(&[], 0, 0).with_ld(ld),
                    MatMut::new(&mut c, big, 0).with_ld(ld),
                )
                .unwrap();
            emulated()
                .run_unpacked::<Int8>(
                    MatRef::new(&[], 0, 0).with_ld(ld),
                    BRef::k_by_n(&[], 0, big).with_ld(ld),
                    MatMut::new(&mut c, 0, big).with_ld(ld),
                )
                .unwrap();
            // One row of A of up to 2^20 elements, and N = 0.
            let k = big.min(1 << 20);
            emulated()
                .run_unpacked::<Int8>(
                    MatRef::new(&vec![0; k], 1, k).with_ld(ld.max(k)),
                    BRef::k_by_n(&[], k, 0).with_ld(ld),
                    MatMut::new(&mut c, 1, 0).with_ld(ld),
                )
                .unwrap();
            for (m, n, k) in [(big, 0, 0), (0, big, 0), (0, 0, big), (big, 0, 1)] {
                let a = vec![0i8; m.min(1)];
                let r =
                    reference::gemm::<Int8>(m, n, k, &a, 1, &[], ld, &mut c, ld, Mode::Overwrite);
                if m <= 1 || k == 0 {
                    r.unwrap();
                } else {
                    assert!(
                        matches!(
                            r,
                            Err(GemmError::SliceTooShort { .. } | GemmError::TooLarge { .. })
                        ),
                        "{r:?}"
                    );
                }
            }
            reference::verify::<Int8>(big, 0, 0, &[], ld, &[], ld, None, &c, ld, Outputs::All)
                .unwrap();
        }
    }
    // K = 0 with M, N > 0: C = 0, or unchanged; A and B are never read (empty, any ld).
    for mode in [Mode::Overwrite, Mode::Accumulate] {
        let c0 = vec![f32::NAN, 2.0, -3.0, 9.0, 9.0, f32::INFINITY, 5.0, 6.0];
        let want: Vec<f32> = match mode {
            Mode::Overwrite => vec![0.0, 0.0, 0.0, 9.0, 9.0, 0.0, 0.0, 0.0],
            Mode::Accumulate => c0.clone(),
        };
        let gemm = emulated().mode(mode);
        let mut c = c0.clone();
        gemm.run_unpacked::<Bf16>(
            MatRef::new(&[], 2, 0).with_ld(usize::MAX),
            BRef::k_by_n(&[], 0, 3).with_ld(7),
            MatMut::new(&mut c, 2, 3).with_ld(5),
        )
        .unwrap();
        assert!(same_all(&c, &want), "{mode:?}: {c:?}");
        let mut c = c0.clone();
        let p = PackedB::<Bf16>::pack(&[], 0, 3, 0).unwrap();
        gemm.run(2, &[], 0, &p, &mut c, 5).unwrap();
        assert!(same_all(&c, &want), "{mode:?}: {c:?}");
        let mut c = c0.clone();
        reference::gemm::<Bf16>(2, 3, 0, &[], 99, &[], 99, &mut c, 5, mode).unwrap();
        assert!(same_all(&c, &want), "reference {mode:?}: {c:?}");
        // An accumulating call leaves the NaN and the infinity in C, and so does the reference.
        let start = (mode == Mode::Accumulate).then_some(&c0[..]);
        reference::verify::<Bf16>(2, 3, 0, &[], 99, &[], 99, start, &want, 5, Outputs::All)
            .unwrap();
    }
}

/// A one-row A or C may have any leading dimension, up to `usize::MAX` (the stride of a single
/// row is never used): was an overflow panic computing the lower tile row's offset.
#[test]
fn one_row_with_huge_leading_dimensions() {
    for ld in [
        usize::MAX,
        usize::MAX / 2,
        usize::MAX / 16,
        1 << 62,
        1 << 40,
    ] {
        let (n, k) = (40, 70);
        let a: Vec<i8> = random(k, 1);
        let b: Vec<i8> = random(k * n, 2);
        for mode in [Mode::Overwrite, Mode::Accumulate] {
            let c0: Vec<i32> = random(n, 3);
            let mut c = c0.clone();
            emulated()
                .mode(mode)
                .run_unpacked::<Int8>(
                    MatRef::new(&a, 1, k).with_ld(ld),
                    BRef::k_by_n(&b, k, n),
                    MatMut::new(&mut c, 1, n).with_ld(ld),
                )
                .unwrap();
            let mut want = c0.clone();
            reference::gemm::<Int8>(1, n, k, &a, ld, &b, n, &mut want, ld, mode).unwrap();
            assert_eq!(c, want, "ld {ld} {mode:?}");
        }
        let a: Vec<bf16> = random(k, 4);
        let b: Vec<bf16> = random(k * n, 5);
        let mut c = vec![0f32; n];
        emulated()
            .run_unpacked::<Bf16>(
                MatRef::new(&a, 1, k).with_ld(ld),
                BRef::k_by_n(&b, k, n),
                MatMut::new(&mut c, 1, n).with_ld(ld),
            )
            .unwrap();
        reference::verify::<Bf16>(1, n, k, &a, ld, &b, n, None, &c, ld, Outputs::All).unwrap();
        // A one-column B of one row: any ldb.
        let p = PackedB::<Bf16>::pack(&b[..1], 1, 1, ld).unwrap();
        assert_eq!(p.get(0, 0), Some(b[0]));
    }
}

/// Every operand's leading dimension one short of its row, through every call.
#[test]
fn leading_dimensions_smaller_than_the_row() {
    let (m, n, k) = (3, 5, 4);
    let a = vec![1i8; 64];
    let b = vec![1i8; 64];
    let c0 = vec![7i32; 64];
    let ld_error = |operand, ld, cols| GemmError::LeadingDimension { operand, ld, cols };
    let calls = |lda: usize, ldb: usize, ldc: usize| {
        let mut c = c0.clone();
        let run = emulated().run_unpacked::<Int8>(
            MatRef::new(&a, m, k).with_ld(lda),
            BRef::k_by_n(&b, k, n).with_ld(ldb),
            MatMut::new(&mut c, m, n).with_ld(ldc),
        );
        assert_eq!(c, c0);
        let reference =
            reference::gemm::<Int8>(m, n, k, &a, lda, &b, ldb, &mut c, ldc, Mode::Overwrite);
        assert_eq!(c, c0);
        let verify =
            reference::verify::<Int8>(m, n, k, &a, lda, &b, ldb, None, &c, ldc, Outputs::All);
        (
            run.unwrap_err(),
            reference.unwrap_err(),
            verify.unwrap_err(),
        )
    };
    let (run, refer, verify) = calls(k - 1, n, n);
    assert_eq!(run, ld_error(Operand::A, k - 1, k));
    assert_eq!(refer, run);
    assert_eq!(verify, VerifyError::Input(run));
    let (run, refer, verify) = calls(k, n - 1, n);
    assert_eq!(run, ld_error(Operand::B, n - 1, n));
    assert_eq!(refer, run);
    assert_eq!(verify, VerifyError::Input(run));
    let (run, refer, verify) = calls(k, n, n - 1);
    assert_eq!(run, ld_error(Operand::C, n - 1, n));
    assert_eq!(refer, run);
    assert_eq!(verify, VerifyError::Input(run.clone()));
    assert!(
        verify.to_string().contains("leading dimension of C"),
        "{verify}"
    );
    assert_eq!(
        PackedB::<U8S8>::pack_transposed(&b, k, n, k - 1).unwrap_err(),
        ld_error(Operand::B, k - 1, k)
    );
}

/// Slices exactly long enough work (with wide leading dimensions: the last row is short);
/// one element less is `SliceTooShort` with the numbers; C is untouched past the window.
#[test]
fn slices_exactly_long_enough_and_one_short() {
    let (m, n, k) = (35, 33, 70);
    let (lda, ldb, ldc) = (k + 3, n + 5, n + 2);
    let (la, lb, lc) = ((m - 1) * lda + k, (k - 1) * ldb + n, (m - 1) * ldc + n);
    let a: Vec<u8> = random(la, 1);
    let b: Vec<i8> = random(lb, 2);
    let c0: Vec<i32> = vec![-1; lc];
    let mut c = c0.clone();
    emulated()
        .threads(2)
        .run_unpacked::<U8S8>(
            MatRef::new(&a, m, k).with_ld(lda),
            BRef::k_by_n(&b, k, n).with_ld(ldb),
            MatMut::new(&mut c, m, n).with_ld(ldc),
        )
        .unwrap();
    reference::verify::<U8S8>(m, n, k, &a, lda, &b, ldb, None, &c, ldc, Outputs::All).unwrap();
    for i in 0..m - 1 {
        assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|&x| x == -1));
    }
    let short = |operand, needed| GemmError::SliceTooShort {
        operand,
        needed,
        len: needed - 1,
    };
    let mut c = c0.clone();
    let gemm = emulated();
    assert_eq!(
        gemm.run_unpacked::<U8S8>(
            MatRef::new(&a[..la - 1], m, k).with_ld(lda),
            BRef::k_by_n(&b, k, n).with_ld(ldb),
            MatMut::new(&mut c, m, n).with_ld(ldc)
        ),
        Err(short(Operand::A, la))
    );
    assert_eq!(
        gemm.run_unpacked::<U8S8>(
            MatRef::new(&a, m, k).with_ld(lda),
            BRef::k_by_n(&b[..lb - 1], k, n).with_ld(ldb),
            MatMut::new(&mut c, m, n).with_ld(ldc)
        ),
        Err(short(Operand::B, lb))
    );
    assert_eq!(
        gemm.run_unpacked::<U8S8>(
            MatRef::new(&a, m, k).with_ld(lda),
            BRef::k_by_n(&b, k, n).with_ld(ldb),
            MatMut::new(&mut c[..lc - 1], m, n).with_ld(ldc)
        ),
        Err(short(Operand::C, lc))
    );
    assert_eq!(c, c0);
    assert_eq!(
        reference::verify::<U8S8>(
            m,
            n,
            k,
            &a,
            lda,
            &b,
            ldb,
            Some(&c0[..lc - 1]),
            &c,
            ldc,
            Outputs::All
        ),
        Err(VerifyError::Input(short(Operand::C, lc)))
    );
}

/// Dimensions whose products overflow `usize` (or cannot be allocated) are refused before any
/// large allocation, by every call.
#[test]
fn huge_dimensions_fail_before_allocating() {
    let h = usize::MAX / 2;
    let (r, largest) = largest_allocation(|| {
        let mut c: Vec<f32> = vec![];
        let run = emulated().run_unpacked::<Bf16>(
            MatRef::new(&[], h, h),
            BRef::k_by_n(&[], h, h),
            MatMut::new(&mut c, h, h),
        );
        let pack = PackedB::<Bf16>::pack(&[], h, h, h).map(|_| ());
        let reference =
            reference::gemm::<Bf16>(h, h, h, &[], h, &[], h, &mut c, h, Mode::Accumulate);
        (run.map(|_| ()), pack, reference)
    });
    assert_eq!(
        r.0,
        Err(GemmError::TooLarge {
            operand: Operand::A
        })
    );
    assert_eq!(
        r.1,
        Err(GemmError::TooLarge {
            operand: Operand::B
        })
    );
    assert_eq!(
        r.2,
        Err(GemmError::TooLarge {
            operand: Operand::A
        })
    );
    assert!(largest < 1 << 16, "allocated {largest} bytes");

    // k * n overflows (one-row B with a huge stride is fine, but not two).
    let (r, largest) = largest_allocation(|| {
        PackedB::<Int8>::pack(&[0; 8], 1 << 33, 1 << 33, 1 << 33).map(|_| ())
    });
    assert_eq!(
        r,
        Err(GemmError::TooLarge {
            operand: Operand::B
        })
    );
    assert!(largest < 1 << 16, "allocated {largest} bytes");

    // The shapes fit in `usize` but the slices are short: refused, nothing allocated.
    let (r, largest) = largest_allocation(|| {
        let mut c = vec![0i32; 16];
        emulated()
            .run_unpacked::<Int8>(
                MatRef::new(&[0; 16], 4, 1 << 40),
                BRef::k_by_n(&[0; 16], 1 << 40, 4),
                MatMut::new(&mut c, 4, 4),
            )
            .map(|_| ())
    });
    assert!(
        matches!(
            r,
            Err(GemmError::SliceTooShort {
                operand: Operand::A,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(largest < 1 << 16, "allocated {largest} bytes");
}

/// Thread counts: 0 is one per core, and more than `Gemm::MAX_THREADS` is refused before any
/// work (it used to spin in the split of the work over `usize::MAX` threads, or to leave parts
/// of C unwritten beyond rayon's 65535 threads).
#[test]
fn thread_counts_zero_and_huge() {
    let (m, n, k) = (40, 70, 33);
    let a: Vec<i8> = random(m * k, 1);
    let b: Vec<i8> = random(k * n, 2);
    let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
    let mut want = vec![0i32; m * n];
    reference::gemm::<Int8>(m, n, k, &a, k, &b, n, &mut want, n, Mode::Overwrite).unwrap();
    let mut c = vec![0i32; m * n];
    let gemm = Gemm::new().threads(0).backend(Backend::Emulated);
    let stats = gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
    assert_eq!(c, want);
    assert!(stats.threads >= 1 && stats.threads <= Gemm::MAX_THREADS);
    for threads in [Gemm::MAX_THREADS + 1, 65_536, 100_000, usize::MAX] {
        let gemm = Gemm::new().threads(threads).backend(Backend::Emulated);
        let err = GemmError::TooManyThreads {
            requested: threads,
            max: Gemm::MAX_THREADS,
        };
        let mut c = vec![5i32; m * n];
        assert_eq!(gemm.run(m, &a, k, &packed, &mut c, n), Err(err.clone()));
        assert_eq!(
            gemm.run_unpacked::<Int8>(
                MatRef::new(&a, m, k),
                BRef::k_by_n(&b, k, n),
                MatMut::new(&mut c, m, n)
            ),
            Err(err.clone())
        );
        // Also when there is nothing to compute.
        assert_eq!(
            gemm.run_unpacked::<Int8>(
                MatRef::new(&[], 0, 0),
                BRef::k_by_n(&[], 0, 0),
                MatMut::new(&mut c, 0, 0)
            ),
            Err(err.clone())
        );
        assert!(c.iter().all(|&x| x == 5));
        assert!(err.to_string().contains("at most"), "{err}");
    }
}

/// Blocking fields 0, 1, not multiples of the tile, and `usize::MAX` (which used to overflow
/// rounding up, or computing the prefetch distance) give the default blocking's result, bit for
/// bit.
#[test]
fn blocking_extremes() {
    let values = [0, 1, 31, 33, usize::MAX - 40, usize::MAX];
    let (m, n, k) = (70, 40, 200);
    let a: Vec<bf16> = random(m * k, 1);
    let b: Vec<bf16> = random(k * n, 2);
    let c0: Vec<f32> = random(m * n, 3);
    let packed = PackedB::<Bf16>::pack(&b, k, n, n).unwrap();
    let base = emulated().mode(Mode::Accumulate);
    let mut want = c0.clone();
    base.run(m, &a, k, &packed, &mut want, n).unwrap();
    reference::verify::<Bf16>(m, n, k, &a, k, &b, n, Some(&c0), &want, n, Outputs::All).unwrap();
    for (i, &x) in values.iter().enumerate() {
        for field in 0..4 {
            let mut blocking = Blocking::DEFAULT;
            match field {
                0 => blocking.nc = x,
                1 => blocking.kc_steps = x,
                2 => blocking.mc = x,
                _ => blocking.prefetch_steps = x,
            }
            if field == 3 && i % 2 == 0 {
                blocking = Blocking {
                    nc: x,
                    kc_steps: x,
                    mc: x,
                    prefetch_steps: x,
                };
            }
            let mut c = c0.clone();
            base.clone()
                .blocking(blocking)
                .run(m, &a, k, &packed, &mut c, n)
                .unwrap_or_else(|e| panic!("{blocking:?}: {e}"));
            assert!(same_all(&c, &want), "{blocking:?}");
        }
    }
}

/// A `PackedB` brings its own K and N: A and C sized for other dimensions are refused with the
/// operand named.
#[test]
fn packed_b_with_mismatched_arguments() {
    let packed = PackedB::<Int8>::pack(&[1; 8 * 3], 8, 3, 3).unwrap();
    let mut c = vec![0i32; 6];
    // A written for K = 4.
    assert_eq!(
        emulated().run(2, &[1; 8], 4, &packed, &mut c, 3),
        Err(GemmError::LeadingDimension {
            operand: Operand::A,
            ld: 4,
            cols: 8
        })
    );
    assert_eq!(
        emulated().run(2, &[1; 8], 8, &packed, &mut c, 3),
        Err(GemmError::SliceTooShort {
            operand: Operand::A,
            needed: 16,
            len: 8
        })
    );
    // C written for N = 2.
    assert_eq!(
        emulated().run(2, &[1; 16], 8, &packed, &mut c[..4], 2),
        Err(GemmError::LeadingDimension {
            operand: Operand::C,
            ld: 2,
            cols: 3
        })
    );
    assert_eq!(c, [0; 6]);
    emulated().run(2, &[1; 16], 8, &packed, &mut c, 3).unwrap();
    assert_eq!(c, [8; 6]);
}

/// Accumulating into C that holds extreme values: int32 wraps exactly as the silicon does; a
/// NaN or infinite f32 C stays NaN or infinite. Overwriting ignores whatever C held.
#[test]
fn accumulate_into_extreme_c() {
    let (m, n, k) = (17, 33, 65);
    let a = vec![127i8; m * k];
    let b = vec![127i8; k * n];
    for start in [i32::MAX, i32::MIN, -1, 0] {
        let c0 = vec![start; m * n];
        let mut c = c0.clone();
        emulated()
            .mode(Mode::Accumulate)
            .run_unpacked::<Int8>(
                MatRef::new(&a, m, k),
                BRef::k_by_n(&b, k, n),
                MatMut::new(&mut c, m, n),
            )
            .unwrap();
        let want = start.wrapping_add((127 * 127 * k) as i32);
        assert!(c.iter().all(|&x| x == want), "{start}");
        reference::verify::<Int8>(m, n, k, &a, k, &b, n, Some(&c0), &c, n, Outputs::All).unwrap();
    }
    let a = vec![bf16::from_f32(1.5); m * k];
    let b = vec![bf16::from_f32(-2.0); k * n];
    for start in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::MAX, -0.0] {
        let mut c = vec![start; m * n];
        emulated()
            .mode(Mode::Accumulate)
            .run_unpacked::<Bf16>(
                MatRef::new(&a, m, k),
                BRef::k_by_n(&b, k, n),
                MatMut::new(&mut c, m, n),
            )
            .unwrap();
        let want = start + (-3.0 * k as f32);
        assert!(c.iter().all(|&x| same(x, want)), "{start}: {:?}", c[0]);
        let mut c = vec![start; m * n];
        emulated()
            .run_unpacked::<Bf16>(
                MatRef::new(&a, m, k),
                BRef::k_by_n(&b, k, n),
                MatMut::new(&mut c, m, n),
            )
            .unwrap();
        assert!(c.iter().all(|&x| x == -3.0 * k as f32), "overwrite {start}");
    }
}

/// NaN, infinities, denormals and the largest bf16 values as inputs: no panic, `Ok`, and the
/// IEEE outcomes (NaN spreads along its row and column; infinity times a non-zero is infinite,
/// times zero NaN; denormals count as zero).
#[test]
fn nan_and_infinity_in_bf16_inputs() {
    let (m, n, k) = (33, 34, 40);
    let one = bf16::from_f32(1.0);
    let mut a = vec![one; m * k];
    let mut b = vec![bf16::ZERO; k * n];
    for kk in 0..k {
        b[kk * n + 1] = one; // column 1: sums of rows of A
        b[kk * n + 2] = bf16::from_f32(1e-40); // column 2: denormals (zero)
    }
    a[3 * k + 5] = bf16::NAN;
    a[4 * k + 6] = bf16::INFINITY;
    a[5 * k + 7] = bf16::NEG_INFINITY;
    a[6 * k + 8] = bf16::MAX;
    a[6 * k + 9] = bf16::MAX;
    let mut c = vec![0f32; m * n];
    let r = no_panic("bf16 specials", || {
        emulated().run_unpacked::<Bf16>(
            MatRef::new(&a, m, k),
            BRef::k_by_n(&b, k, n),
            MatMut::new(&mut c, m, n),
        )
    });
    r.unwrap();
    let at = |i: usize, j: usize| c[i * n + j];
    assert_eq!(at(0, 1), k as f32);
    assert!(at(3, 1).is_nan() && at(3, 0).is_nan() && at(3, 2).is_nan());
    assert_eq!(at(4, 1), f32::INFINITY);
    assert!(at(4, 0).is_nan(), "infinity x 0"); // inf * 0 = NaN
    assert_eq!(at(5, 1), f32::NEG_INFINITY);
    assert_eq!(at(6, 1), f32::INFINITY, "MAX + MAX overflows f32");
    assert_eq!(at(0, 2), 0.0, "denormals count as zero");
    assert_eq!(at(0, 0), 0.0);
    // The reference and verify do not panic on them either.
    let mut d = vec![0f32; m * n];
    reference::gemm::<Bf16>(m, n, k, &a, k, &b, n, &mut d, n, Mode::Overwrite).unwrap();
    assert!(d[3 * n].is_nan());
    // Column 2 of row 4 is infinity times a denormal: NaN, since the denormal reads as zero.
    assert!(at(4, 2).is_nan(), "infinity x denormal");
    // `verify` passes the emulated result and the reference's own (NaN where the reference is
    // NaN, the same infinity where it is infinite, and MAX + MAX, finite in f64, as the
    // infinity it rounds to in f32), and rejects each class changed.
    for (name, result) in [("emulated", &c), ("reference", &d)] {
        let r = no_panic("verify", || {
            reference::verify::<Bf16>(m, n, k, &a, k, &b, n, None, result, n, Outputs::All)
        });
        assert!(r.is_ok(), "{name}: {r:?}");
    }
    for (i, j, wrong) in [
        (3, 1, f32::INFINITY),
        (4, 1, f32::NAN),
        (4, 1, f32::NEG_INFINITY),
        (4, 0, f32::INFINITY),
        (4, 2, 0.0),
        (5, 1, f32::INFINITY),
        (0, 1, k as f32 + 1.0),
        (0, 2, f32::NAN),
    ] {
        let mut e = c.clone();
        e[i * n + j] = wrong;
        let r = reference::verify::<Bf16>(m, n, k, &a, k, &b, n, None, &e, n, Outputs::All);
        assert!(
            matches!(&r, Err(VerifyError::Mismatch(x)) if (x.row, x.col) == (i, j)),
            "C[{i}][{j}] = {wrong}: {r:?}"
        );
    }
    // Packing keeps NaN bits.
    let p = PackedB::<Bf16>::pack(&a, m, k, k).unwrap();
    assert!(p.get(3, 5).unwrap().is_nan());
}

/// The smaller public entry points: no panic on any input.
#[test]
fn other_entry_points() {
    for text in ["", " int8 ", "BF16", "\u{0}", "u8s8\n", "fp8", "ü"] {
        let _ = no_panic("PrecisionKind::from_str", || text.parse::<PrecisionKind>());
    }
    // (Not unwrapped: other tests use the same worker pools concurrently.)
    let _ = no_panic("release_tiles(Emulated)", || {
        release_tiles(Backend::Emulated)
    });
    let _ = no_panic("release_tiles(Hardware)", || {
        release_tiles(Backend::Hardware)
    });
    for k in [0, 1, usize::MAX] {
        for mag in [0.0, 1.0, f64::MAX, f64::INFINITY, f64::NAN] {
            let _ = no_panic("bf16_tolerance", || reference::bf16_tolerance(k, mag));
        }
    }
    let _: Vec<i32> = random(0, 0);
}

// ---------------------------------------------------------------------------------------------
// bf16 verification: flushed results, denormal inputs, special values
// ---------------------------------------------------------------------------------------------

/// `x` as a bf16, which it must be exactly (so each input below is the value it names).
fn bf(x: f64) -> bf16 {
    let y = bf16::from_f64(x);
    assert!(y.to_f64() == x || x.is_nan(), "{x} is not a bf16");
    y
}

/// `C (+)= A x B` of dense row-major bf16 matrices on the emulator: accumulating into `c0`
/// when given, else overwriting.
fn emulated_bf16(
    (m, n, k): (usize, usize, usize),
    a: &[bf16],
    b: &[bf16],
    c0: Option<&[f32]>,
) -> Vec<f32> {
    let (mode, mut c) = match c0 {
        Some(c0) => (Mode::Accumulate, c0.to_vec()),
        None => (Mode::Overwrite, vec![f32::NAN; m * n]),
    };
    emulated()
        .mode(mode)
        .run_unpacked::<Bf16>(
            MatRef::new(a, m, k),
            BRef::k_by_n(b, k, n),
            MatMut::new(&mut c, m, n),
        )
        .unwrap();
    c
}

/// `verify`'s verdicts on `C (+)= A x B` (dense, row-major): it passes the emulated result and
/// the reference's own, and rejects the emulated result with any one finite output moved by
/// four tolerances (a finite output is always held to the bound). Returns the emulated result.
fn check_verdicts(
    what: &str,
    (m, n, k): (usize, usize, usize),
    a: &[bf16],
    b: &[bf16],
    c0: Option<&[f32]>,
) -> Vec<f32> {
    let c = emulated_bf16((m, n, k), a, b, c0);
    let verify = |c: &[f32]| reference::verify::<Bf16>(m, n, k, a, k, b, n, c0, c, n, Outputs::All);
    if let Err(e) = verify(&c) {
        panic!("{what}: verify rejects the emulated result: {e}");
    }
    let mode = c0.map_or(Mode::Overwrite, |_| Mode::Accumulate);
    let mut d = c0.map_or_else(|| vec![0.0; m * n], <[f32]>::to_vec);
    reference::gemm::<Bf16>(m, n, k, a, k, b, n, &mut d, n, mode).unwrap();
    if let Err(e) = verify(&d) {
        panic!("{what}: verify rejects the reference's own result: {e}");
    }
    for i in 0..m {
        for j in 0..n {
            let got = f64::from(c[i * n + j]);
            let start = c0.map_or(0.0, |c0| f64::from(c0[i * n + j]));
            let plain = plain_bf16(
                start,
                (0..k).map(|kk| (a[i * k + kk].to_f64(), b[kk * n + j].to_f64())),
            );
            assert!(
                bf16_output_ok(got, &plain, k),
                "{what}: C[{i}][{j}] = {got}"
            );
            let wrong = got + 4.0 * reference::bf16_tolerance(k, plain.magnitude);
            if !(wrong as f32).is_finite() {
                continue;
            }
            let mut e = c.clone();
            e[i * n + j] = wrong as f32;
            let r = verify(&e);
            assert!(
                matches!(&r, Err(VerifyError::Mismatch(x)) if (x.row, x.col) == (i, j)),
                "{what}: C[{i}][{j}] = {wrong} (four tolerances off) passes: {r:?}"
            );
        }
    }
    c
}

/// Every product `2^-63 x 2^-64 = 2^-127` is below `2^-126`, so each FMA step of each lane
/// flushes it and the tiles return 0 for an exact `K * 2^-127` (or C's start unchanged): the
/// bound must cover K flushed products, not one flush per rounding of a sum tree.
#[test]
fn bf16_flushed_tiny_products_pass_verify() {
    let (m, n) = (2, 3);
    for k in [32, 64, 96, 1000, 4096] {
        let a = vec![bf(2f64.powi(-63)); m * k];
        let b = vec![bf(2f64.powi(-64)); k * n];
        let c = check_verdicts(&format!("K = {k}"), (m, n, k), &a, &b, None);
        assert!(c.iter().all(|&x| x == 0.0), "K = {k}: {c:?}");
        // Accumulating: C's start survives, the products vanish.
        let c0 = [
            2f32.powi(-120),
            0.0,
            -2f32.powi(-125),
            1.0,
            -3.0,
            2f32.powi(-126),
        ];
        let c = check_verdicts(&format!("K = {k}, from c0"), (m, n, k), &a, &b, Some(&c0));
        assert_eq!(c, c0, "K = {k}");
    }
}

/// Tiny products that cancel exactly, cancel partly and then flush, survive (at or above
/// `2^-126`, or grown above it by earlier steps of the lane), and tiny products after normal
/// ones in the same lane (absorbed by rounding, not flushed).
#[test]
fn bf16_tiny_products_cancel_survive_and_mix() {
    let k = 320;
    let rows: [&dyn Fn(usize) -> f64; 6] = [
        // +2^-127, -2^-127 alternating pairwise: each step flushes; exact sum 0.
        &|kk| if kk % 4 < 2 { 1.0 } else { -1.0 },
        // 2^-125 then 2^-125 (1 - 2^-5) with the opposite sign in each lane: a remainder of
        // 2^-130 each time, flushed; then tiny products of one sign.
        &|kk| match kk % 32 {
            0 | 1 => 4.0,
            2 | 3 => -4.0 * (1.0 - 2f64.powi(-5)),
            _ => 0.75,
        },
        // 2^-126 exactly (survives) mixed with 2^-128 (flushed or, once the lane holds a
        // normal value, added).
        &|kk| if kk % 3 == 0 { 2.0 } else { 0.5 },
        // A normal product first in each lane, then tiny ones: absorbed, not flushed.
        &|kk| if kk % 32 < 2 { 2f64.powi(100) } else { 1.5 },
        // Tiny products of one sign, a few normal products of the other.
        &|kk| if kk % 50 == 7 { -2f64.powi(40) } else { 1.75 },
        // Products from 2^-135 up to 2^-118, signs mixed.
        &|kk| {
            let s = splitmix(kk as u64);
            let sign = if s.is_multiple_of(5) { -1.0 } else { 1.0 };
            sign * 2f64.powi((s >> 8) as i32 % 18 - 8) * (1.0 + ((s >> 16) % 8) as f64 / 8.0)
        },
    ];
    // Row r's product at k is `rows[r](k) * 2^-127` (A's part times B's 2^-64).
    let a: Vec<bf16> = rows
        .iter()
        .flat_map(|f| (0..k).map(move |kk| bf(f(kk) * 2f64.powi(-63))))
        .collect();
    let n = 2;
    let b = vec![bf(2f64.powi(-64)); k * n];
    let m = rows.len();
    let c = check_verdicts("mixtures", (m, n, k), &a, &b, None);
    // The rows of one-signed tiny products lose to the flushes: the first row cancels to 0.
    assert_eq!(c[0], 0.0);
    let c0: Vec<f32> = (0..m * n)
        .map(|x| (x as f32 - 5.0) * 2f32.powi(-124))
        .collect();
    check_verdicts("mixtures, from c0", (m, n, k), &a, &b, Some(&c0));
    // With each K: 1 to 70 (partial dot products, one or two of them).
    for k in [1, 2, 31, 33, 63, 65, 70] {
        let a: Vec<bf16> = rows
            .iter()
            .flat_map(|f| (0..k).map(move |kk| bf(f(kk) * 2f64.powi(-63))))
            .collect();
        check_verdicts(
            &format!("mixtures, K = {k}"),
            (m, n, k),
            &a,
            &b[..k * n],
            None,
        );
    }
}

/// The tiles read a denormal bf16 input, and a denormal starting C, as zero (DAZ); the
/// reference must too, or it expects `2^-130 x 2^100 = 2^-30` where the tiles give 0.
#[test]
fn bf16_denormal_inputs_and_start_read_as_zero() {
    let (m, n, k) = (2, 2, 40);
    // Row 0: denormal A times large B; row 1: normal A, B's column 1 denormal.
    let mut a = vec![bf(2f64.powi(-130)); k];
    a.extend(vec![bf(2f64.powi(90)); k]);
    let b: Vec<bf16> = (0..k)
        .flat_map(|_| [bf(2f64.powi(100)), bf(-3.0 * 2f64.powi(-133))])
        .collect();
    let c = check_verdicts("denormal inputs", (m, n, k), &a, &b, None);
    assert_eq!(c[0], 0.0, "denormal A x 2^100");
    assert_eq!(c[3], 0.0, "2^90 x denormal B");
    assert_eq!(
        c[2],
        k as f32 * 2f32.powi(90) * 2f32.powi(100),
        "normal x normal"
    );
    let mut d = vec![1.0f32; m * n];
    reference::gemm::<Bf16>(m, n, k, &a, k, &b, n, &mut d, n, Mode::Overwrite).unwrap();
    assert_eq!(d, c, "the reference reads denormals as zero too");

    // C's start 2^-127 (denormal) plus 2^-63 x 2^-63 = 2^-126: the tiles give 2^-126
    // (docs/semantics.md section 10), not 1.5 x 2^-126.
    let a = [bf(2f64.powi(-63))];
    let b = [bf(2f64.powi(-63))];
    let c0 = [2f32.powi(-127)];
    let c = check_verdicts("denormal start", (1, 1, 1), &a, &b, Some(&c0));
    let c = [c[0]];
    assert_eq!(c, [2f32.powi(-126)]);
    let mut d = c0;
    reference::gemm::<Bf16>(1, 1, 1, &a, 1, &b, 1, &mut d, 1, Mode::Accumulate).unwrap();
    assert_eq!(d, c, "the reference reads a denormal start as zero");
    // With K = 0 no dot product runs: C keeps its denormal, and the reference agrees.
    reference::gemm::<Bf16>(1, 1, 0, &[], 1, &[], 1, &mut d, 1, Mode::Accumulate).unwrap();
    assert_eq!(d, c);
    let mut e = c0;
    reference::gemm::<Bf16>(1, 1, 0, &[], 1, &[], 1, &mut e, 1, Mode::Accumulate).unwrap();
    assert_eq!(e, c0);
    reference::verify::<Bf16>(1, 1, 0, &[], 1, &[], 1, Some(&c0), &e, 1, Outputs::All).unwrap();
}

/// One bf16 output `c0 + sum a_k b_k` from `(a_k, b_k)` pairs (even k feed one lane, odd k
/// the other): the emulated result, after checking `verify` passes it and the reference's.
fn special(what: &str, pairs: &[(f64, f64)], c0: Option<f32>) -> f32 {
    let a: Vec<bf16> = pairs.iter().map(|p| bf(p.0)).collect();
    let b: Vec<bf16> = pairs.iter().map(|p| bf(p.1)).collect();
    let c0 = c0.map(|x| [x]);
    check_verdicts(
        what,
        (1, 1, pairs.len()),
        &a,
        &b,
        c0.as_ref().map(|x| &x[..]),
    )[0]
}

/// Whether `verify` rejects `got` as the output of [`special`]'s product.
fn special_rejects(pairs: &[(f64, f64)], c0: Option<f32>, got: f32) -> bool {
    let a: Vec<bf16> = pairs.iter().map(|p| bf(p.0)).collect();
    let b: Vec<bf16> = pairs.iter().map(|p| bf(p.1)).collect();
    let c0 = c0.map(|x| [x]);
    let k = pairs.len();
    let r = reference::verify::<Bf16>(
        1,
        1,
        k,
        &a,
        k,
        &b,
        1,
        c0.as_ref().map(|x| &x[..]),
        &[got],
        1,
        Outputs::All,
    );
    matches!(r, Err(VerifyError::Mismatch(_)))
}

/// Infinite and NaN outputs are compared by class: NaN where the reference is NaN, the same
/// infinity where it is infinite (or where its finite value rounds to one in f32), and any
/// non-finite output where the finite terms are large enough for an intermediate sum to
/// overflow; a finite output is still held to the bound.
#[test]
fn bf16_special_outputs_verify_by_class() {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let big = 2f64.powi(127);
    let max = bf16::MAX.to_f64();
    let tiny = 2f64.powi(-130); // a bf16 denormal

    // +inf times 1: +inf; NaN, -inf and finite values are wrong.
    let p = [(inf, 1.0), (1.0, 1.0)];
    assert_eq!(special("inf", &p, None), f32::INFINITY);
    for wrong in [f32::NAN, f32::NEG_INFINITY, f32::MAX, 1.0] {
        assert!(special_rejects(&p, None, wrong), "inf: {wrong}");
    }
    // A NaN input, infinity times zero, infinity times a denormal (zero by DAZ), +inf and
    // -inf products: NaN, and nothing else.
    for (what, p) in [
        ("NaN", [(nan, 1.0), (1.0, 1.0)]),
        ("inf x 0", [(inf, 0.0), (1.0, 1.0)]),
        ("inf x denormal", [(inf, tiny), (1.0, 1.0)]),
        ("inf - inf", [(inf, 1.0), (-inf, 1.0)]),
    ] {
        assert!(special(what, &p, None).is_nan(), "{what}");
        for wrong in [f32::INFINITY, f32::NEG_INFINITY, 0.0, 1.0] {
            assert!(special_rejects(&p, None, wrong), "{what}: {wrong}");
        }
    }
    // Infinities in C's start.
    let p = [(1.0, 2.0), (3.0, 4.0)];
    assert_eq!(
        special("-inf start", &p, Some(f32::NEG_INFINITY)),
        f32::NEG_INFINITY
    );
    assert!(special_rejects(&p, Some(f32::NEG_INFINITY), f32::INFINITY));
    assert!(special_rejects(&p, Some(f32::NEG_INFINITY), 14.0));
    assert!(special("-inf start + inf", &[(inf, 1.0)], Some(f32::NEG_INFINITY)).is_nan());

    // Products too large for f32, finite in f64: each lane overflows to +inf.
    let p = [(max, max), (max, max)];
    assert_eq!(special("MAX^2 + MAX^2", &p, None), f32::INFINITY);
    assert!(special_rejects(&p, None, f32::MAX));
    assert!(special_rejects(&p, None, 0.0));
    // Two products of 2^127, one per lane: te + to = 2^128 rounds to +inf.
    assert_eq!(
        special("2^127 + 2^127", &[(big, 1.0), (big, 1.0)], None),
        f32::INFINITY
    );
    // +inf in the even lane, -inf in the odd one from finite products: NaN for an exact 0.
    let p = [(max, max), (-max, max)];
    assert!(special("+inf and -inf lanes", &p, None).is_nan());
    // A true +inf in one lane, an overflow to -inf in the other: NaN for an exact +inf; -inf
    // is still wrong.
    let p = [(inf, 1.0), (-max, max)];
    assert!(special("inf and overflowed lane", &p, None).is_nan());
    assert!(special_rejects(&p, None, f32::NEG_INFINITY));
    // An overflow in the even lane (2^127 + 2^127) for an exact sum of 2^127: +inf. A finite
    // output far from 2^127 is wrong all the same.
    let p = [(big, 1.0), (-big, 1.0), (big, 1.0)];
    assert_eq!(special("lane overflow", &p, None), f32::INFINITY);
    assert!(special_rejects(&p, None, 1e37));
    assert!(special_rejects(&p, None, -2e38));
    // No overflow happens here, but the terms are large enough for one: a non-finite output
    // is accepted, a finite one is held to the bound.
    let p = [(big, 1.0), (big, 1.0), (-big, 1.0), (-big, 1.0)];
    assert_eq!(special("large, cancelling", &p, None), 0.0);
    for possible in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        assert!(!special_rejects(&p, None, possible), "{possible}");
    }
    assert!(special_rejects(&p, None, 1e37));
    // Below the overflow threshold, a non-finite output of a finite sum is wrong.
    let p = [(2f64.powi(100), 1.0), (-2f64.powi(100), 1.0)];
    assert_eq!(special("large, no overflow", &p, None), 0.0);
    for wrong in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        assert!(special_rejects(&p, None, wrong), "{wrong}");
    }
}

/// One output's inputs around `2^-126`: per k, B's row exponent and per (row, k) the product's
/// exponent, sign, and whether A's element is a denormal instead (read as zero) or a normal
/// product's.
#[derive(Clone, Debug)]
struct TinyCase {
    m: usize,
    n: usize,
    k: usize,
    /// The exponent products cluster around, and how far they spread.
    center: i32,
    spread: i32,
    /// Out of 16: negative products, denormal A elements, products near 1.
    negative: u64,
    denormal: u64,
    normal: u64,
    accumulate: bool,
    seed: u64,
}

fn tiny_case() -> impl Strategy<Value = TinyCase> {
    (
        (1..=3usize, 1..=4usize),
        prop_oneof![
            4 => 1..=400usize,
            1 => prop::sample::select(vec![32usize, 64, 96, 1000, 4096]),
        ],
        // Mostly narrow clusters just below and above 2^-126, where flushing decides.
        (-132..=-120i32, prop_oneof![2 => 0..=2i32, 1 => 3..=8i32]),
        (
            prop_oneof![2 => 0..=2u64, 1 => 3..=8u64],
            prop_oneof![3 => Just(0u64), 1 => 1..=4u64],
            prop_oneof![3 => Just(0u64), 1 => 1..=2u64],
        ),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |((m, n), k, (center, spread), (negative, denormal, normal), accumulate, seed)| {
                TinyCase {
                    m,
                    n,
                    k,
                    center,
                    spread,
                    negative,
                    denormal,
                    normal,
                    accumulate,
                    seed,
                }
            },
        )
}

/// The inputs of a [`TinyCase`]: A (`m x k`), B (`k x n`) and C's start when accumulating.
fn tiny_inputs(t: &TinyCase) -> (Vec<bf16>, Vec<bf16>, Option<Vec<f32>>) {
    let mut s = t.seed;
    let mut next = || {
        s = splitmix(s);
        s
    };
    // An exactly representable significand: 1 + j/8.
    let significand = |r: u64| 1.0 + (r % 8) as f64 / 8.0;
    let b_exp: Vec<i32> = (0..t.k).map(|_| -70 + (next() % 21) as i32).collect();
    let b: Vec<bf16> = (0..t.k * t.n)
        .map(|x| bf(significand(next()) * 2f64.powi(b_exp[x / t.n])))
        .collect();
    let a: Vec<bf16> = (0..t.m * t.k)
        .map(|x| {
            let r = next();
            let sign = if (r >> 8) % 16 < t.negative {
                -1.0
            } else {
                1.0
            };
            let exp = if (r >> 12) % 16 < t.normal {
                -10
            } else {
                t.center + ((r >> 16) % (2 * t.spread as u64 + 1)) as i32 - t.spread
            };
            if (r >> 4) % 16 < t.denormal {
                // bf16 denormals are multiples of 2^-133.
                bf(sign * (1.0 + ((r >> 24) % 4) as f64 / 4.0) * 2f64.powi(-131))
            } else {
                bf(sign * significand(r >> 24) * 2f64.powi(exp - b_exp[x % t.k]))
            }
        })
        .collect();
    let c0 = t.accumulate.then(|| {
        (0..t.m * t.n)
            .map(|_| {
                let r = next();
                let x =
                    [0.0, 2f32.powi(-127), 2f32.powi(-125), 2f32.powi(-115), 1.0][r as usize % 5];
                if (r >> 8) % 2 == 0 {
                    x
                } else {
                    -x
                }
            })
            .collect()
    });
    (a, b, c0)
}

proptest! {
    #![proptest_config(config(128))]

    /// Products around `2^-126`, where the tiles flush at every step: `verify` passes the
    /// emulated GEMM and the reference, and rejects outputs moved by four tolerances.
    #[test]
    fn bf16_products_near_the_flush_threshold(t in tiny_case()) {
        let (a, b, c0) = tiny_inputs(&t);
        check_verdicts(&format!("{t:?}"), (t.m, t.n, t.k), &a, &b, c0.as_deref());
    }
}
