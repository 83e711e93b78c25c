//! Correctness of every precision on every backend, against the plain reference: the edge sizes
//! (1, 15, 16, 17, 33, 64, 1000) in M, N and K, random shapes, both modes, 1, 2 and more threads
//! than cores, and leading dimensions larger than the rows.

mod common;

use amx_gemm::reference::{verify, Outputs};
use amx_gemm::{BRef, MatMut, MatRef};
use amx_gemm::{Bf16, Gemm, Int8, Mode, PackedB, Precision, S8U8, U8S8, U8U8};
use amx_test_support::{random, splitmix};
use common::{backends, check};

const EDGES: [usize; 6] = [1, 15, 16, 17, 33, 64];

/// Every combination of the small edge sizes in M, N and K, alternating modes and padding.
fn edge_combinations<P: Precision>(test: &str)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    for backend in backends(test) {
        let mut i = 0;
        for m in EDGES {
            for n in EDGES {
                for k in EDGES {
                    let mode = if i % 2 == 0 {
                        Mode::Overwrite
                    } else {
                        Mode::Accumulate
                    };
                    check::<P>(backend, m, n, k, 1, mode, i % 3, i as u64);
                    i += 1;
                }
            }
        }
    }
}

#[test]
fn edge_combinations_int8() {
    edge_combinations::<Int8>("edge_combinations_int8");
}

#[test]
fn edge_combinations_u8s8() {
    edge_combinations::<U8S8>("edge_combinations_u8s8");
}

#[test]
fn edge_combinations_bf16() {
    edge_combinations::<Bf16>("edge_combinations_bf16");
}

/// 1000 in one, two or all three dimensions (the others edge sizes), and the skinny shapes of
/// the benchmark (M = 1 and 16 with N = K = 4096), on 2 threads.
fn thousand<P: Precision>(test: &str)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let shapes = [
        (1000, 17, 33),
        (17, 1000, 33),
        (33, 17, 1000),
        (1000, 1000, 1),
        (1000, 1, 1000),
        (1, 1000, 1000),
        (1000, 64, 64),
        (64, 1000, 15),
        (1000, 1000, 1000),
        (1, 4096, 4096),
        (16, 4096, 4096),
    ];
    for backend in backends(test) {
        for (i, &(m, n, k)) in shapes.iter().enumerate() {
            let mode = if i % 2 == 0 {
                Mode::Accumulate
            } else {
                Mode::Overwrite
            };
            check::<P>(backend, m, n, k, 2, mode, 1, 100 + i as u64);
        }
    }
}

#[test]
fn thousand_int8() {
    thousand::<Int8>("thousand_int8");
}

#[test]
fn thousand_u8s8() {
    thousand::<U8S8>("thousand_u8s8");
}

#[test]
fn thousand_bf16() {
    thousand::<Bf16>("thousand_bf16");
}

/// Random shapes up to 150 in each dimension, random thread counts, modes and padding.
#[test]
fn random_shapes_all_precisions() {
    for backend in backends("random_shapes_all_precisions") {
        let mut seed = 42u64;
        let mut next = |bound: u64| {
            seed = splitmix(seed);
            (seed % bound) as usize
        };
        for i in 0..24 {
            let (m, n, k) = (1 + next(150), 1 + next(150), 1 + next(150));
            let threads = 1 + next(4);
            let mode = [Mode::Overwrite, Mode::Accumulate][next(2)];
            let pad = next(5);
            match i % 5 {
                0 => check::<Int8>(backend, m, n, k, threads, mode, pad, i),
                1 => check::<U8S8>(backend, m, n, k, threads, mode, pad, i),
                2 => check::<S8U8>(backend, m, n, k, threads, mode, pad, i),
                3 => check::<U8U8>(backend, m, n, k, threads, mode, pad, i),
                _ => check::<Bf16>(backend, m, n, k, threads, mode, pad, i),
            }
        }
    }
}

/// 1, 2 and more threads than cores (and 0: one per core) on shapes that split both ways.
#[test]
fn thread_counts() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for backend in backends("thread_counts") {
        for threads in [0, 1, 2, cores + 3] {
            check::<Int8>(backend, 130, 97, 70, threads, Mode::Overwrite, 0, 7);
            check::<U8S8>(backend, 33, 260, 64, threads, Mode::Accumulate, 2, 8);
            check::<Bf16>(backend, 200, 40, 33, threads, Mode::Accumulate, 1, 9);
        }
    }
}

/// Blockings much smaller than the defaults exercise every loop of the nest more than once
/// (several nc, kc and mc blocks, each with its own edges).
#[test]
fn small_blocking_runs_every_loop() {
    use amx_gemm::Blocking;
    for backend in backends("small_blocking_runs_every_loop") {
        let blocking = Blocking {
            nc: 64,
            kc_steps: 1,
            mc: 32,
            prefetch_steps: 1,
        };
        let (m, n, k) = (100, 150, 200);
        for mode in [Mode::Overwrite, Mode::Accumulate] {
            let a: Vec<i8> = random(m * k, 1);
            let b: Vec<i8> = random(k * n, 2);
            let c0: Vec<i32> = random(m * n, 3);
            let mut c = c0.clone();
            Gemm::new()
                .threads(2)
                .mode(mode)
                .backend(backend)
                .blocking(blocking)
                .run_unpacked::<Int8>(
                    MatRef::new(&a, m, k),
                    BRef::k_by_n(&b, k, n),
                    MatMut::new(&mut c, m, n),
                )
                .unwrap();
            let start = (mode == Mode::Accumulate).then_some(&c0[..]);
            verify::<Int8>(m, n, k, &a, k, &b, n, start, &c, n, Outputs::All).unwrap();
        }
    }
}

/// The packed B is reusable, the transposed packing gives the same product, and the unpacked
/// convenience path agrees with the packed one.
#[test]
fn packing_paths_agree() {
    for backend in backends("packing_paths_agree") {
        let (m, n, k) = (40, 50, 70);
        let a: Vec<u8> = random(m * k, 1);
        let b: Vec<i8> = random(k * n, 2);
        let bt: Vec<i8> = (0..n * k).map(|x| b[(x % k) * n + x / k]).collect();
        let packed = PackedB::<U8S8>::pack(&b, k, n, n).unwrap();
        let packed_t = PackedB::<U8S8>::pack_transposed(&bt, k, n, k).unwrap();
        let gemm = Gemm::new().threads(2).backend(backend);
        let mut c1 = vec![0i32; m * n];
        let mut c2 = vec![1i32; m * n];
        let mut c3 = vec![2i32; m * n];
        gemm.run(m, &a, k, &packed, &mut c1, n).unwrap();
        gemm.run(m, &a, k, &packed_t, &mut c2, n).unwrap();
        gemm.run_unpacked::<U8S8>(
            MatRef::new(&a, m, k),
            BRef::k_by_n(&b, k, n),
            MatMut::new(&mut c3, m, n),
        )
        .unwrap();
        assert_eq!(c1, c2);
        assert_eq!(c1, c3);
        // Reuse: the same packed B again.
        let mut c4 = vec![0i32; m * n];
        gemm.run(m, &a, k, &packed, &mut c4, n).unwrap();
        assert_eq!(c1, c4);
        verify::<U8S8>(m, n, k, &a, k, &b, n, None, &c1, n, Outputs::All).unwrap();
    }
}

/// Extreme int8 values wrap exactly as the silicon does, and K = 0 gives 0 (overwrite) or
/// leaves C (accumulate).
#[test]
fn extremes_and_empty_k() {
    for backend in backends("extremes_and_empty_k") {
        let (m, n, k) = (20, 20, 4096);
        let a = vec![-128i8; m * k];
        let b = vec![-128i8; k * n];
        let mut c = vec![i32::MAX; m * n];
        Gemm::new()
            .backend(backend)
            .mode(Mode::Accumulate)
            .run_unpacked::<Int8>(
                MatRef::new(&a, m, k),
                BRef::k_by_n(&b, k, n),
                MatMut::new(&mut c, m, n),
            )
            .unwrap();
        let want = i32::MAX.wrapping_add((16384i64 * k as i64) as i32);
        assert!(c.iter().all(|&x| x == want));

        let mut c = vec![5i32; 6];
        let gemm = Gemm::new().backend(backend);
        gemm.run_unpacked::<Int8>(
            MatRef::new(&[], 2, 0),
            BRef::k_by_n(&[], 0, 3),
            MatMut::new(&mut c, 2, 3),
        )
        .unwrap();
        assert_eq!(c, [0; 6]);
        let mut c = vec![5.0f32; 6];
        gemm.mode(Mode::Accumulate)
            .run_unpacked::<Bf16>(
                MatRef::new(&[], 2, 0),
                BRef::k_by_n(&[], 0, 3),
                MatMut::new(&mut c, 2, 3),
            )
            .unwrap();
        assert_eq!(c, [5.0; 6]);
    }
}

/// A caller's rayon pool: the call runs on its threads (one worker each), and a repeated call
/// loads no configuration, because worker `i` runs on pool thread `i` every time.
#[test]
fn gemm_runs_on_a_callers_pool() {
    use std::sync::Arc;
    let pool = Arc::new(
        amx_gemm::rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .thread_name(|i| format!("caller-{i}"))
            .build()
            .unwrap(),
    );
    // Whole micro-tiles split evenly: each worker has one configuration, kept loaded.
    let (m, n, k) = (96, 96, 200);
    let a: Vec<i8> = (0..m * k).map(|i| (i % 13) as i8 - 6).collect();
    let b: Vec<i8> = (0..k * n).map(|i| (i % 11) as i8 - 5).collect();
    let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
    let gemm = Gemm::new()
        .threads(1) // the pool's thread count wins
        .pool(Arc::clone(&pool))
        .backend(amx_gemm::Backend::Emulated);
    assert_eq!(gemm.thread_count(), 3);
    let mut c = vec![0i32; m * n];
    let first = gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
    assert_eq!(first.threads, 3);
    assert_eq!(
        first.loads(),
        3,
        "one load on each of the pool's fresh threads"
    );
    verify::<Int8>(m, n, k, &a, k, &b, n, None, &c, n, Outputs::All).unwrap();
    let again = gemm.run(m, &a, k, &packed, &mut c, n).unwrap();
    assert_eq!(again.loads(), 0, "{again:?}");
    verify::<Int8>(m, n, k, &a, k, &b, n, None, &c, n, Outputs::All).unwrap();
    // Options naming the same pool are equal; another pool is another option.
    assert_eq!(gemm, gemm.clone());
    let other = Arc::new(
        amx_gemm::rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap(),
    );
    assert_ne!(gemm, gemm.clone().pool(other));
}
