//! `Case::footprint` is an upper bound of what `Harness::run` allocates, so the harness can
//! refuse a case the machine cannot hold before it allocates anything (instead of being killed
//! by the OOM killer while it fills its inputs); and no dimension makes it panic.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use amx_gemm::{Backend, CStores, Mode, PrecisionKind};
use amx_tools::measure::{Case, Harness, MeasureError};

/// Bytes allocated now, and the most at any time since the last reset.
static LIVE: AtomicUsize = AtomicUsize::new(0);
static HIGH: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting.
struct Counting;

// SAFETY: every request is forwarded unchanged to the system allocator; the counters are
// atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            HIGH.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let out = unsafe { System.realloc(ptr, layout, new_size) };
        if !out.is_null() {
            // Both blocks may be live during the copy: count the new one first.
            let live = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            HIGH.fetch_max(live, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        out
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn case(dtype: PrecisionKind, m: usize, n: usize, k: usize, threads: usize) -> Case {
    Case {
        dtype,
        m,
        n,
        k,
        threads,
        reps: 1,
        backend: Some(Backend::Emulated),
        mode: Mode::Accumulate,
        c_stores: CStores::Auto,
    }
}

#[test]
fn footprint_bounds_what_a_run_allocates() {
    let mut harness = Harness::new();
    harness.peak_time = Duration::from_millis(5);
    // Small int8 K (the packed panels' gap dominates B), a single micro-row with a long K (its
    // packed-A block holds all of K), edges, two threads, each precision, and a B large enough
    // that the bandwidth buffer is its size rather than the minimum.
    let cases = [
        case(PrecisionKind::Int8, 40, 700, 3, 1),
        case(PrecisionKind::Int8, 7, 40, 5000, 1),
        case(PrecisionKind::U8S8, 100, 90, 200, 2),
        case(PrecisionKind::Bf16, 33, 65, 300, 2),
        // bf16 packed-A blocks of 1 MiB, which the AVX2 float kernel also keeps widened.
        case(PrecisionKind::Bf16, 128, 64, 32_000, 2),
        case(PrecisionKind::Int8, 64, 3000, 4000, 2),
    ];
    for c in cases {
        // Measured from what is live before the run: the first case also builds the pools and
        // the threads' packed-A blocks, which the bound includes.
        let before = LIVE.load(Ordering::Relaxed);
        HIGH.store(before, Ordering::Relaxed);
        let report = harness.run(&c).unwrap();
        assert!(report.check.is_ok(), "{c:?}: {:?}", report.check);
        let used = HIGH.load(Ordering::Relaxed) - before;
        let bound = c.footprint().unwrap();
        assert!(
            used as u128 <= bound,
            "{c:?}: allocated {used} bytes at the most, footprint {bound}"
        );
    }
}

#[test]
fn any_dimension_is_an_error_not_a_panic() {
    let mut harness = Harness::new();
    harness.peak_time = Duration::from_millis(5);
    for (m, n, k) in [
        (1, 1, usize::MAX),
        (usize::MAX, 1, 1),
        (1, usize::MAX, 1),
        (usize::MAX, usize::MAX, usize::MAX),
        (1 << 40, 1 << 40, 1),
        (1, 1 << 20, 1 << 40),
    ] {
        for dtype in [PrecisionKind::Int8, PrecisionKind::Bf16] {
            let c = case(dtype, m, n, k, 1);
            match harness.run(&c) {
                Err(
                    MeasureError::TooLarge { .. }
                    | MeasureError::InsufficientMemory { .. }
                    | MeasureError::OutOfMemory { .. },
                ) => {}
                other => panic!("{c:?}: {other:?}"),
            }
        }
    }
}
