#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! The silicon code path under the trap engine against the emulator backend: a 256^3 int8
//! GEMM on one thread through the `Hardware` backend (its micro-kernels' AMX instructions
//! trapping, their sites patched after their second execution) and the same GEMM on
//! `Backend::Emulated`, timed in the same run. Ends with the ratio, and checks that both
//! products are equal.
//!
//! `cargo bench -p amx-gemm --bench trap`. On a CPU with AMX the engine does not install and
//! the bench says so (the `Hardware` backend then runs on the silicon).

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod linux {
    use std::time::Instant;

    use amx_gemm::{Backend, Gemm, Int8, PackedB};
    use amx_test_support::random;
    use amx_trap as trap;
    use criterion::{criterion_group, Criterion};

    const N: usize = 256;

    /// Median seconds of `runs` calls of `f`.
    fn median_s(runs: usize, mut f: impl FnMut()) -> f64 {
        let mut t: Vec<f64> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .collect();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    }

    fn bench(c: &mut Criterion) {
        if let Err(why) = trap::install() {
            println!("trap engine not timed: {why}");
            return;
        }
        let a: Vec<i8> = random(N * N, 1);
        let b: Vec<i8> = random(N * N, 2);
        let packed = PackedB::<Int8>::pack(&b, N, N, N).unwrap();
        let emulated = Gemm::new().threads(1).backend(Backend::Emulated);
        let trapped = Gemm::new().threads(1).backend(Backend::Hardware);
        let mut c_emu = vec![0i32; N * N];
        let mut c_trap = vec![0i32; N * N];
        // First runs: threads, configurations, and the trapped sites patched.
        emulated.run(N, &a, N, &packed, &mut c_emu, N).unwrap();
        trapped.run(N, &a, N, &packed, &mut c_trap, N).unwrap();
        assert_eq!(
            c_emu, c_trap,
            "the trapped GEMM differs from the emulated one"
        );
        let mut group = c.benchmark_group("gemm 256^3 int8, 1 thread");
        group.sample_size(10);
        group.bench_function("emulator backend", |bench| {
            bench.iter(|| emulated.run(N, &a, N, &packed, &mut c_emu, N).unwrap())
        });
        group.bench_function("Hardware backend under the trap engine", |bench| {
            bench.iter(|| trapped.run(N, &a, N, &packed, &mut c_trap, N).unwrap())
        });
        group.finish();
        // Interleaved, so that a busy host slows both alike.
        let (mut emu, mut trap_s) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            emu.push(median_s(3, || {
                emulated.run(N, &a, N, &packed, &mut c_emu, N).unwrap();
            }));
            trap_s.push(median_s(3, || {
                trapped.run(N, &a, N, &packed, &mut c_trap, N).unwrap();
            }));
        }
        let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let (emu, trap_s) = (best(&emu), best(&trap_s));
        println!();
        println!(
            "patching: {}, sites patched: {}",
            trap::patching(),
            trap::patched_sites()
        );
        println!(
            "gemm 256^3 int8, 1 thread: emulator backend {:.2} ms",
            emu * 1e3
        );
        println!(
            "gemm 256^3 int8, 1 thread: Hardware backend trapped {:.2} ms ({:.2}x the emulator)",
            trap_s * 1e3,
            trap_s / emu
        );
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
