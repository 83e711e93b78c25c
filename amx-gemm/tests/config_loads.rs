//! Each worker loads each tile configuration at most once per call, and a repeated call on the
//! persistent workers loads none (the runtime's tracking makes a repeated `configure` free).
//! Its own test binary: no other test shares these worker threads.

mod common;

use amx_gemm::{Gemm, Int8, PackedB};
use amx_test_support::random;
use common::backends;

/// The two tests share the worker pools, and one releases them: run them one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn loads_at_most_once_per_worker_per_config() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for backend in backends("loads_at_most_once_per_worker_per_config") {
        for threads in [1, 2, cores + 1] {
            // 64 x 96: every worker has full micro-tiles only, one configuration.
            // 70 x 100: edges in both directions, up to four configurations per worker.
            for (m, n, k) in [(64, 96, 64), (70, 100, 130)] {
                let a: Vec<i8> = random(m * k, 1);
                let b: Vec<i8> = random(k * n, 2);
                let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
                let mut c = vec![0i32; m * n];
                let gemm = Gemm::new().threads(threads).backend(backend);
                let what = format!("{m}x{n}x{k} on {threads} threads, {backend}");
                let first = gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
                for w in &first.workers {
                    assert!(w.loads <= w.configs as u64, "{what}: {first:?}");
                }
                let again = gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
                for (w, before) in again.workers.iter().zip(&first.workers) {
                    assert_eq!(w.configs, before.configs, "{what}");
                    // The worker starts with the configuration it ended with, so it reloads
                    // every other one: none when it has a single configuration.
                    assert!(
                        w.loads < w.configs.max(1) as u64,
                        "{what}: repeated call reloaded: {again:?}"
                    );
                    if w.configs == 1 {
                        assert_eq!(w.loads, 0, "{what}");
                    }
                }
                if (m, n) == (64, 96) {
                    assert_eq!(again.loads(), 0, "{what}: {again:?}");
                }
            }
        }
    }
}

#[test]
fn release_then_reload() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for backend in backends("release_then_reload") {
        let (m, n, k) = (64, 64, 64);
        let a: Vec<i8> = random(m * k, 1);
        let packed = PackedB::<Int8>::pack(&random::<i8>(k * n, 2), k, n, n).unwrap();
        let mut c = vec![0i32; m * n];
        let gemm = Gemm::new().threads(3).backend(backend);
        gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
        amx_gemm::release_tiles(backend).unwrap();
        let after = gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
        let busy = after.workers.iter().filter(|w| w.configs > 0).count() as u64;
        assert_eq!(
            after.loads(),
            busy,
            "every busy worker loads its configuration again"
        );
    }
}
