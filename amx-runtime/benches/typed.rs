#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! The typed path costs nothing over the raw instructions: a 2x2 int8 micro-kernel (4 C tiles,
//! 2 A, 2 B, K = 64 per step) written with typed handles against the same kernel written with
//! Intel's intrinsics (raw asm), on the silicon. Where the silicon is absent, the typed kernel is
//! compared with the same kernel through the run-time-checked instructions on the emulator.
//! Ends with the ratio measured in this run.

use std::hint::black_box;
use std::time::Instant;

use amx_runtime::{tilecfg, Backend};
use criterion::{criterion_group, Criterion};

tilecfg! {
    struct Micro;
    palette 1;
    t0 as c00: 16x16 i32;
    t1 as c01: 16x16 i32;
    t2 as c10: 16x16 i32;
    t3 as c11: 16x16 i32;
    t4 as a0: 16x64 i8;
    t5 as a1: 16x64 i8;
    t6 as b0: 16x64 i8;
    t7 as b1: 16x64 i8;
}

const STEPS: usize = 64;

/// A panel of A (2 tiles) and B (2 tiles) for every step.
struct Panels {
    a: Vec<i8>,
    b: Vec<i8>,
}

fn panels() -> Panels {
    Panels {
        a: amx_test_support::random(STEPS * 2 * 1024, 1),
        b: amx_test_support::random(STEPS * 2 * 1024, 2),
    }
}

fn typed_kernel(p: &Panels, c: &mut [i32]) {
    let mut t = Micro::configure().unwrap();
    // Each handle has its own type (its register and shape), so no loop over them.
    t.zero(Micro::c00);
    t.zero(Micro::c01);
    t.zero(Micro::c10);
    t.zero(Micro::c11);
    for s in 0..STEPS {
        let (a, b) = (&p.a[s * 2048..], &p.b[s * 2048..]);
        t.load(Micro::a0, &a[..1024], 64).unwrap();
        t.load(Micro::a1, &a[1024..2048], 64).unwrap();
        t.load(Micro::b0, &b[..1024], 64).unwrap();
        t.load(Micro::b1, &b[1024..2048], 64).unwrap();
        t.tdpbssd(Micro::c00, Micro::a0, Micro::b0);
        t.tdpbssd(Micro::c01, Micro::a0, Micro::b1);
        t.tdpbssd(Micro::c10, Micro::a1, Micro::b0);
        t.tdpbssd(Micro::c11, Micro::a1, Micro::b1);
    }
    let (c0, rest) = c.split_at_mut(256);
    let (c1, rest) = rest.split_at_mut(256);
    let (c2, c3) = rest.split_at_mut(256);
    t.store(Micro::c00, c0, 16).unwrap();
    t.store(Micro::c01, c1, 16).unwrap();
    t.store(Micro::c10, c2, 16).unwrap();
    t.store(Micro::c11, &mut c3[..256], 16).unwrap();
}

/// The same kernel through the run-time-checked instructions (every shape checked each time).
fn checked_kernel(backend: Backend, p: &Panels, c: &mut [i32]) {
    let mut t = amx_runtime::configure_on(backend, &Micro::CONFIG).unwrap();
    for tile in 0..4 {
        t.tilezero(tile).unwrap();
    }
    // The untyped instructions take bytes: view the same memory as bytes (no copy, so both
    // kernels do the same work).
    // SAFETY: i8 and u8 have the same size and alignment, and every bit pattern is valid for
    // both; the views borrow `p` immutably for as long as they live.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(p.a.as_ptr().cast::<u8>(), p.a.len()),
            std::slice::from_raw_parts(p.b.as_ptr().cast::<u8>(), p.b.len()),
        )
    };
    for s in 0..STEPS {
        let (a, b) = (&a[s * 2048..], &b[s * 2048..]);
        t.tileloadd(4, &a[..1024], 64).unwrap();
        t.tileloadd(5, &a[1024..2048], 64).unwrap();
        t.tileloadd(6, &b[..1024], 64).unwrap();
        t.tileloadd(7, &b[1024..2048], 64).unwrap();
        t.tdpbssd(0, 4, 6).unwrap();
        t.tdpbssd(1, 4, 7).unwrap();
        t.tdpbssd(2, 5, 6).unwrap();
        t.tdpbssd(3, 5, 7).unwrap();
    }
    // SAFETY: any bytes form valid i32s, u8 needs no alignment, and the view is the only use
    // of `c` while it lives.
    let out = unsafe {
        std::slice::from_raw_parts_mut(c.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(c))
    };
    for tile in 0..4u8 {
        t.tilestored(tile, &mut out[tile as usize * 1024..][..1024], 64)
            .unwrap();
    }
}

/// The same kernel with Intel's intrinsics: the raw asm, no checks at all.
#[cfg(target_arch = "x86_64")]
fn raw_kernel(p: &Panels, c: &mut [i32]) {
    use amx_runtime::intrinsics::*;
    // Load the configuration through the runtime, so its tracking stays right.
    let guard = amx_runtime::configure_on(Backend::Hardware, &Micro::CONFIG).unwrap();
    // SAFETY: Micro::CONFIG is loaded on this thread (the guard holds it), so tiles 0-3 are
    // 16x64 i32 accumulators and 4-7 are 16x64 operands; every A and B slice below holds 1024
    // bytes (16 rows of 64), and C holds 4 x 256 i32.
    unsafe {
        _tile_zero::<0>();
        _tile_zero::<1>();
        _tile_zero::<2>();
        _tile_zero::<3>();
        for s in 0..STEPS {
            let (a, b) = (p.a.as_ptr().add(s * 2048), p.b.as_ptr().add(s * 2048));
            _tile_loadd::<4>(a.cast(), 64);
            _tile_loadd::<5>(a.add(1024).cast(), 64);
            _tile_loadd::<6>(b.cast(), 64);
            _tile_loadd::<7>(b.add(1024).cast(), 64);
            _tile_dpbssd::<0, 4, 6>();
            _tile_dpbssd::<1, 4, 7>();
            _tile_dpbssd::<2, 5, 6>();
            _tile_dpbssd::<3, 5, 7>();
        }
        _tile_stored::<0>(c.as_mut_ptr().cast(), 64);
        _tile_stored::<1>(c.as_mut_ptr().add(256).cast(), 64);
        _tile_stored::<2>(c.as_mut_ptr().add(512).cast(), 64);
        _tile_stored::<3>(c.as_mut_ptr().add(768).cast(), 64);
    }
    drop(guard);
}

#[cfg(target_arch = "x86_64")]
fn hardware() -> bool {
    match amx_runtime::Hardware::new() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("raw asm not measured (the silicon is not usable here: {why}); comparing the typed path with the checked path on the emulator");
            false
        }
    }
}

fn bench(c: &mut Criterion) {
    let p = panels();
    let mut out = vec![0i32; 1024];
    let mut group = c.benchmark_group("2x2 int8 micro-kernel, 64 steps");
    group.bench_function(
        format!("typed ({})", amx_runtime::backend().unwrap()),
        |b| b.iter(|| typed_kernel(black_box(&p), &mut out)),
    );
    #[cfg(target_arch = "x86_64")]
    if hardware() {
        group.bench_function("raw intrinsics (hardware)", |b| {
            b.iter(|| raw_kernel(black_box(&p), &mut out))
        });
    }
    group.bench_function("checked instructions (emulated)", |b| {
        b.iter(|| checked_kernel(Backend::Emulated, black_box(&p), &mut out))
    });
    group.finish();
}

/// The median time per call of `a` and of `b`, in ns, and the median of their per-pair ratios,
/// from batches that alternate between the two, in turn first (so a noisy stretch of a shared
/// machine, which may last a few batches, hits both sides of a pair alike).
fn paired(a: &mut dyn FnMut(), b: &mut dyn FnMut()) -> (f64, f64, f64) {
    let batch = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..100 {
            f();
        }
        t.elapsed().as_nanos() as f64 / 100.0
    };
    let (mut times_a, mut times_b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..41 {
        let (ta, tb) = if pair % 2 == 0 {
            let ta = batch(a);
            (ta, batch(b))
        } else {
            let tb = batch(b);
            (batch(a), tb)
        };
        times_a.push(ta);
        times_b.push(tb);
        ratios.push(ta / tb);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (
        median(&mut times_a),
        median(&mut times_b),
        median(&mut ratios),
    )
}

fn ratio() {
    let p = panels();
    let (mut typed_out, mut other_out) = (vec![0i32; 1024], vec![0i32; 1024]);
    #[cfg(target_arch = "x86_64")]
    if hardware() && amx_runtime::backend() == Ok(Backend::Hardware) {
        let (typed, raw, ratio) = paired(&mut || typed_kernel(&p, &mut typed_out), &mut || {
            raw_kernel(&p, &mut other_out)
        });
        assert_eq!(typed_out, other_out, "typed and raw kernels disagree");
        println!(
            "typed {typed:.0} ns, raw intrinsics {raw:.0} ns per kernel (medians): typed / raw = \
             {ratio:.3} (median of 41 alternating pairs)"
        );
        return;
    }
    let (typed, checked, ratio) = paired(&mut || typed_kernel(&p, &mut typed_out), &mut || {
        checked_kernel(Backend::Emulated, &p, &mut other_out)
    });
    assert_eq!(typed_out, other_out, "typed and checked kernels disagree");
    println!(
        "emulator: typed {typed:.0} ns, checked {checked:.0} ns per kernel (medians): typed / \
         checked = {ratio:.3} (median of 41 alternating pairs)"
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratio();
}
