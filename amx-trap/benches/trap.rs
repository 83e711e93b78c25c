#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! The trap engine's cost per instruction against the emulator backend's own, for TILELOADD
//! (1 KiB) and TDPBSSD (16x16x64): the emulator backend (`configure_on(Backend::Emulated, ..)`
//! and method calls), a trapped instruction on the slow path (a SIGILL round trip each time:
//! patching off), and a patched site (repeat executions through its stub). Ends with the
//! ratios to the emulator, measured in the same run.
//!
//! `cargo bench -p amx-trap --bench trap`. On a CPU with AMX the engine does not install
//! and only the emulator is timed.

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod linux {
    use std::hint::black_box;
    use std::time::Instant;

    use amx_runtime::intrinsics::{_tile_dpbssd, _tile_loadconfig, _tile_loadd, _tile_release};
    use amx_runtime::{configure_on, tilecfg, Backend, TileConfig};
    use amx_trap as trap;
    use criterion::{criterion_group, Criterion};

    static FULL: TileConfig = tilecfg! { palette 1; t0: 16x64; t1: 16x64; t2: 16x64 };

    /// The instructions of one path, each at a site of its own (so that the slow path's sites are
    /// never patched and the patched path's sites are).
    struct Sites {
        load: fn(&[u8; 1024]),
        dot: fn(),
    }

    #[inline(never)]
    fn load_slow(data: &[u8; 1024]) {
        // SAFETY: the engine executes it; 16 rows of 64 bytes at stride 64.
        unsafe { _tile_loadd::<1>(data.as_ptr(), 64) }
    }

    #[inline(never)]
    fn dot_slow() {
        // SAFETY: the engine executes it on the loaded 16x64 configuration.
        unsafe { _tile_dpbssd::<0, 1, 2>() }
    }

    #[inline(never)]
    fn load_fast(data: &[u8; 1024]) {
        // SAFETY: as in `load_slow`.
        unsafe { _tile_loadd::<1>(data.as_ptr(), 64) }
    }

    #[inline(never)]
    fn dot_fast() {
        // SAFETY: as in `dot_slow`.
        unsafe { _tile_dpbssd::<0, 1, 2>() }
    }

    const SLOW: Sites = Sites {
        load: load_slow,
        dot: dot_slow,
    };
    const FAST: Sites = Sites {
        load: load_fast,
        dot: dot_fast,
    };

    fn data() -> [u8; 1024] {
        let mut data = [0u8; 1024];
        amx_test_support::SplitMix64::new(1).fill(&mut data);
        data
    }

    /// Nanoseconds per call of `f`, best of many short timed batches (on a busy host a short batch
    /// is more likely to run without being preempted).
    fn ns_per(mut f: impl FnMut(), calls: u32) -> f64 {
        (0..41)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..calls {
                    f();
                }
                t.elapsed().as_nanos() as f64 / f64::from(calls)
            })
            .fold(f64::INFINITY, f64::min)
    }

    fn bench(c: &mut Criterion) {
        let data = data();
        let mut group = c.benchmark_group("per instruction");
        let mut tiles = configure_on(Backend::Emulated, &FULL).unwrap();
        tiles.tileloadd(2, &data, 64).unwrap();
        group.bench_function("emulator TILELOADD", |b| {
            b.iter(|| tiles.tileloadd(1, black_box(&data), 64).unwrap())
        });
        group.bench_function("emulator TDPBSSD", |b| {
            b.iter(|| tiles.tdpbssd(0, 1, 2).unwrap())
        });
        let emu_load = ns_per(|| tiles.tileloadd(1, black_box(&data), 64).unwrap(), 5_000);
        let emu_dot = ns_per(|| tiles.tdpbssd(0, 1, 2).unwrap(), 500);
        drop(tiles);
        if let Err(why) = trap::install() {
            println!("trap engine not timed: {why}");
            return;
        }
        amx_runtime::permit::request_permission().unwrap();
        // SAFETY: a valid configuration; tile 2 gets data so the products are not of zeros.
        unsafe {
            _tile_loadconfig(FULL.as_bytes().as_ptr());
            _tile_loadd::<2>(data.as_ptr(), 64);
        }
        let mut rows = Vec::new();
        for (name, sites, patch) in [
            ("first (slow path)", &SLOW, false),
            ("repeat (patched)", &FAST, true),
        ] {
            trap::set_patching(patch);
            // Hot before timing: the patched path's sites get their stubs.
            for _ in 0..trap::PATCH_AFTER + 1 {
                (sites.load)(&data);
                (sites.dot)();
            }
            group.bench_function(format!("trapped TILELOADD {name}"), |b| {
                b.iter(|| (sites.load)(black_box(&data)))
            });
            group.bench_function(format!("trapped TDPBSSD {name}"), |b| {
                b.iter(|| (sites.dot)())
            });
            let calls = if patch { 2_000 } else { 50 };
            rows.push((
                name,
                ns_per(|| (sites.load)(black_box(&data)), calls),
                ns_per(|| (sites.dot)(), calls / 4),
            ));
        }
        group.finish();
        // SAFETY: releases the configuration loaded above.
        unsafe { _tile_release() };
        println!();
        println!(
            "patching: {}, sites patched: {}",
            trap::patching(),
            trap::patched_sites()
        );
        println!(
            "{:<28} {:>12} {:>12}",
            "ns per instruction", "TILELOADD", "TDPBSSD"
        );
        println!(
            "{:<28} {emu_load:>12.0} {emu_dot:>12.0}",
            "emulator backend"
        );
        for (name, load, dot) in rows {
            println!(
                "{:<28} {load:>12.0} {dot:>12.0}   ({:.2}x, {:.2}x the emulator)",
                format!("trapped {name}"),
                load / emu_load,
                dot / emu_dot
            );
        }
    }

    criterion_group!(benches, bench);

    pub fn main() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn main() {
    linux::main();
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn main() {
    println!("the trap engine runs only on x86-64 Linux: nothing to time");
}
