//! The harness on hostile arguments: sizes are checked before anything is allocated, every
//! allocation is fallible, thread counts are refused as a GEMM refuses them, and nothing
//! panics. The allocator of this test binary refuses any single request above 64 MiB, as a
//! machine short of memory would.

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use amx_gemm::{Backend, CStores, Gemm, Mode, Operand, PrecisionKind};
use amx_tools::measure::{Case, Harness, MeasureError};

/// The largest single allocation this test binary allows.
const ALLOC_LIMIT: usize = 64 << 20;

/// The system allocator, refusing any single request above [`ALLOC_LIMIT`].
struct Limited;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, or returns
// null (an allowed answer: allocation failure) without touching memory.
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_LIMIT {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
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

/// Runs `f`, failing the test with `what` if it panics.
fn no_panic<R>(what: &str, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => panic!("{what} panicked (see the message above)"),
    }
}

fn case(m: usize, n: usize, k: usize) -> Case {
    Case {
        dtype: PrecisionKind::Int8,
        m,
        n,
        k,
        threads: 1,
        reps: usize::MAX,
        backend: Some(Backend::Emulated),
        mode: Mode::Accumulate,
        c_stores: CStores::Auto,
    }
}

#[test]
fn sizes_are_checked_before_anything_is_allocated() {
    let h = usize::MAX / 2;
    let mut harness = Harness::new();
    for (m, n, k, operand) in [
        (h, 3, 4, Operand::A),
        (3, h, 4, Operand::B),
        (h, h, 0, Operand::C),
    ] {
        let r = no_panic("Harness::run", || harness.run(&case(m, n, k)));
        assert_eq!(
            r.unwrap_err(),
            MeasureError::TooLarge { operand },
            "{m}x{n}x{k}"
        );
    }
    // Addressable but more than any machine has (a PiB of A): refused before allocating, by
    // the footprint check where the OS reports its available memory, else by the allocator.
    for (m, n, k, bytes) in [
        (1 << 20, 3, 1 << 30, 1 << 50),
        (1 << 40, 1 << 10, 0, 1 << 52),
    ] {
        let r = no_panic("Harness::run", || harness.run(&case(m, n, k)));
        assert!(
            matches!(
                r,
                Err(MeasureError::InsufficientMemory { needed, .. }) if needed > bytes as u64
            ) || r == Err(MeasureError::OutOfMemory { bytes }),
            "{m}x{n}x{k}: {r:?}"
        );
    }
    // 256 MiB of A: available on any test machine, but above ALLOC_LIMIT, so `Limited`
    // refuses it. The harness must take that as an error, not abort.
    let r = no_panic("Harness::run", || harness.run(&case(1 << 14, 3, 1 << 14)));
    assert!(
        matches!(r, Err(MeasureError::InsufficientMemory { .. }))
            || r == Err(MeasureError::OutOfMemory { bytes: 1 << 28 }),
        "{r:?}"
    );
    for bytes in [usize::MAX, 1 << 50] {
        let r = no_panic("Harness::bandwidth", || harness.bandwidth(bytes, 1));
        assert_eq!(r, Err(MeasureError::OutOfMemory { bytes }));
    }
}

#[test]
fn thread_counts_above_the_gemm_limit_are_refused() {
    for threads in [Gemm::MAX_THREADS + 1, 65_536, usize::MAX] {
        let err = MeasureError::TooManyThreads {
            requested: threads,
            max: Gemm::MAX_THREADS,
        };
        let mut harness = Harness::new();
        assert_eq!(
            harness.peak(PrecisionKind::Int8, threads, Some(Backend::Emulated)),
            Err(err.clone())
        );
        assert_eq!(harness.bandwidth(1 << 20, threads), Err(err.clone()));
        let c = Case {
            threads,
            reps: 1,
            ..case(3, 3, 3)
        };
        assert_eq!(harness.run(&c).unwrap_err(), err);
        assert!(err.to_string().contains("at most"), "{err}");
    }
}

#[test]
fn a_tiny_case_runs_and_checks() {
    let mut harness = Harness::new();
    harness.peak_time = Duration::from_millis(1);
    let c = Case {
        dtype: PrecisionKind::U8S8,
        reps: 2,
        ..case(3, 5, 7)
    };
    let report = harness.run(&c).unwrap();
    assert!(report.check.is_ok(), "{:?}", report.check);
    assert_eq!((report.threads, report.backend), (1, Backend::Emulated));
    assert!(serde_json::to_string(&report).is_ok_and(|j| j.contains("\"check\":\"ok\"")));
}

/// On the emulator each report carries the cores' SIMD peak for the instructions of the
/// emulator's kernel of its precision, in the text fields and the JSON, where that kernel is
/// not the portable one.
#[test]
fn emulated_reports_carry_the_simd_peak() {
    let mut harness = Harness::new();
    harness.peak_time = Duration::from_millis(1);
    let simd = amx_runtime::peak::simd_peak();
    for (dtype, family) in [
        (PrecisionKind::Int8, simd.int8),
        (PrecisionKind::Bf16, simd.bf16),
        (PrecisionKind::Fp16, simd.float),
    ] {
        let c = Case {
            dtype,
            reps: 2,
            ..case(32, 32, 64)
        };
        let report = harness.run(&c).unwrap();
        let json = serde_json::to_string(&report).unwrap();
        match family {
            Some(_) => {
                let peak = report
                    .simd_peak_gops
                    .expect("an emulated run has a SIMD peak");
                assert!(peak.is_finite() && peak > 0.0, "{dtype:?}: {peak}");
                let share = report.percent_of_simd_peak().unwrap();
                assert!((share - 100.0 * report.gops / peak).abs() < 1e-9);
                assert!(json.contains("\"simd_peak_gops\":"), "{json}");
                assert!(json.contains("\"percent_of_simd_peak\":"), "{json}");
            }
            None => {
                assert_eq!(report.simd_peak_gops, None);
                assert!(!json.contains("simd_peak_gops"), "{json}");
            }
        }
    }
}
