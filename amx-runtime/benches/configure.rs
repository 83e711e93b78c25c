#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! What `configure` costs when the thread already holds the configuration, against a real load
//! (LDTILECFG), on every usable backend. Ends with the ratio measured in this run.

use std::hint::black_box;
use std::time::Instant;

use amx_runtime::{configure_on, Backend, Hardware, TileConfig};
use criterion::{criterion_group, Criterion};

fn configs() -> (TileConfig, TileConfig) {
    let a = TileConfig::builder()
        .tile(0, 16, 64)
        .tile(1, 16, 64)
        .build()
        .unwrap();
    let b = TileConfig::builder()
        .tile(0, 8, 64)
        .tile(1, 16, 64)
        .build()
        .unwrap();
    (a, b)
}

fn backends() -> Vec<Backend> {
    let mut out = vec![Backend::Emulated];
    match Hardware::new() {
        Ok(_) => out.push(Backend::Hardware),
        Err(why) => eprintln!("hardware backend not measured: {why}"),
    }
    out
}

fn bench(c: &mut Criterion) {
    let (a, b) = configs();
    for backend in backends() {
        let mut group = c.benchmark_group(format!("configure/{backend}"));
        group.bench_function("already loaded (skip)", |bench| {
            drop(configure_on(backend, &a).unwrap());
            bench.iter(|| drop(black_box(configure_on(backend, black_box(&a)).unwrap())));
        });
        group.bench_function("alternating (LDTILECFG each time)", |bench| {
            let mut flip = false;
            bench.iter(|| {
                flip = !flip;
                let cfg = if flip { &a } else { &b };
                drop(black_box(configure_on(backend, black_box(cfg)).unwrap()));
            });
        });
        group.finish();
    }
}

/// Interleaved timing of both cases in one loop, so the ratio is not skewed by a noisy phase.
fn ratio() {
    let (a, b) = configs();
    for backend in backends() {
        let rounds = 200_000;
        let (mut skip, mut load) = (0u128, 0u128);
        for chunk in 0..20 {
            let t = Instant::now();
            for _ in 0..rounds / 20 {
                drop(black_box(configure_on(backend, black_box(&a)).unwrap()));
            }
            skip += t.elapsed().as_nanos();
            let t = Instant::now();
            for i in 0..rounds / 20 {
                let cfg = if (i + chunk) % 2 == 0 { &b } else { &a };
                drop(black_box(configure_on(backend, black_box(cfg)).unwrap()));
            }
            load += t.elapsed().as_nanos();
        }
        let (skip, load) = (skip as f64 / rounds as f64, load as f64 / rounds as f64);
        println!(
            "configure on {backend}: already loaded {skip:.1} ns, with LDTILECFG {load:.1} ns: a skipped load is {:.1}x cheaper",
            load / skip
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratio();
}
