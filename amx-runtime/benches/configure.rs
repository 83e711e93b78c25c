#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! What `configure` costs when the thread already holds the configuration, against a real load
//! (LDTILECFG), on every usable backend. Ends with the ratios measured in this run: against the
//! instruction alone (the backend's `ldtilecfg`, alternating two images so none is a no-op) and
//! against a `configure` that must load.

use std::hint::black_box;
use std::time::Instant;

use amx_runtime::{
    configure_on, configure_typed_on, tilecfg, Backend, Emulator, Hardware, TileConfig, TileUnit,
};
use criterion::{criterion_group, Criterion};

tilecfg! {
    struct Typed;
    palette 1;
    t0 as c: 16x16 i32;
    t1 as a: 16x64 i8;
}

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
        group.bench_function("typed, already loaded (skip)", |bench| {
            drop(configure_typed_on::<Typed>(backend).unwrap());
            bench.iter(|| drop(black_box(configure_typed_on::<Typed>(backend).unwrap())));
        });
        group.bench_function("reconfigure on a held guard (skip)", |bench| {
            let mut tiles = configure_on(backend, &a).unwrap();
            bench.iter(|| tiles.reconfigure(black_box(&a)).unwrap());
        });
        group.bench_function("alternating (LDTILECFG each time)", |bench| {
            let mut flip = false;
            bench.iter(|| {
                flip = !flip;
                let cfg = if flip { &a } else { &b };
                drop(black_box(configure_on(backend, black_box(cfg)).unwrap()));
            });
        });
        group.bench_function("LDTILECFG alone (alternating)", |bench| {
            let mut unit = raw_unit(backend);
            let mut flip = false;
            bench.iter(|| {
                flip = !flip;
                let cfg = if flip { &a } else { &b };
                black_box(unit.ldtilecfg(black_box(cfg.as_bytes()))).unwrap();
            });
            unit.tilerelease();
        });
        group.finish();
    }
}

/// The backend's tile unit without the tracking, so LDTILECFG is issued on every call.
fn raw_unit(backend: Backend) -> Box<dyn TileUnit> {
    match backend {
        Backend::Hardware => Box::new(Hardware::new().expect("measured only where usable")),
        _ => Box::new(Emulator::new()),
    }
}

/// Interleaved timing of both cases in one loop, so the ratio is not skewed by a noisy phase.
fn ratio() {
    let (a, b) = configs();
    for backend in backends() {
        let rounds = 200_000;
        let (mut skip, mut load, mut raw, mut held) = (0u128, 0u128, 0u128, 0u128);
        let mut unit = raw_unit(backend);
        for chunk in 0..20 {
            let mut tiles = configure_on(backend, &a).unwrap();
            let t = Instant::now();
            for _ in 0..rounds / 20 {
                tiles.reconfigure(black_box(&a)).unwrap();
            }
            held += t.elapsed().as_nanos();
            drop(tiles);
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
            let t = Instant::now();
            for i in 0..rounds / 20 {
                let cfg = if (i + chunk) % 2 == 0 { &b } else { &a };
                black_box(unit.ldtilecfg(black_box(cfg.as_bytes()))).unwrap();
            }
            raw += t.elapsed().as_nanos();
        }
        unit.tilerelease();
        let per = |total: u128| total as f64 / rounds as f64;
        let (skip, load, raw, held) = (per(skip), per(load), per(raw), per(held));
        println!(
            "configure on {backend}: already loaded {skip:.1} ns; LDTILECFG alone {raw:.1} ns \
             ({:.1}x the skip); configure that loads {load:.1} ns ({:.1}x the skip)",
            raw / skip,
            load / skip
        );
        println!(
            "reconfigure on {backend} (a held guard): already loaded {held:.1} ns; LDTILECFG \
             alone is {:.1}x that",
            raw / held
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratio();
}
