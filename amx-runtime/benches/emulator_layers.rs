#![allow(missing_docs)] // criterion_group! generates an undocumented function
//! What an emulated dot product costs at each layer, on full tiles, so that everything that is
//! not arithmetic shows as the difference between two rows of the same run:
//!
//! 1. `kernel`: the arithmetic alone (the kernel the emulator runs on this CPU);
//! 2. `Emulator`: `TileUnit::tdpbssd` on an `Emulator` value (checks, tile state, D4 zeroing);
//! 3. `Tiles`: the same through the guard `configure_on(Backend::Emulated, ..)` returns (its
//!    inherent instruction methods, which call the backend without a `dyn` call);
//! 4. `typed`: the typed handles of a `tilecfg!` layout, whose operands the types proved.
//!
//! Ends with each layer's time over the kernel's, from interleaved batches of one run.
//!
//! The kernel row derives what it needs from the tiles on every call (TDPBSSD: A's row sums;
//! TDPBF16PS: the operands widened to fp32), which the emulator keeps per tile while the tile
//! is unchanged, so the layers above it can be the faster.

use std::hint::black_box;
use std::time::Instant;

use amx_runtime::rules::DotKind;
use amx_runtime::{
    configure_on, configure_typed_on, peak, tilecfg, Backend, Emulator, TileConfig, TileUnit,
};
use criterion::{criterion_group, Criterion};

tilecfg! {
    struct Int8Tile;
    palette 1;
    t0 as c: 16x16 i32;
    t1 as a: 16x64 i8;
    t2 as b: 16x64 i8;
}

tilecfg! {
    struct Bf16Tile;
    palette 1;
    t0 as c: 16x16 f32;
    t1 as a: 16x32 bf16;
    t2 as b: 16x32 bf16;
}

static FULL: TileConfig = tilecfg! { palette 1; t0: 16x64; t1: 16x64; t2: 16x64 };

/// Tile data of moderate values: every 16-bit element a bf16 between 2^-7 and 2^1 (so the
/// floating-point path sees no denormal, infinity or NaN), every byte a small integer.
fn data() -> [u8; 1024] {
    core::array::from_fn(|i| {
        if i % 2 == 1 {
            0x3C + (i % 4) as u8
        } else {
            (i * 37 % 251) as u8
        }
    })
}

/// One way of running one instruction, as a closure the timing loops call.
type Layer<'a> = (&'static str, Box<dyn FnMut() + 'a>);

/// The four layers for `kind` (TDPBSSD or TDPBF16PS). Each layer owns its own state, so a
/// float C tile never holds an integer product's bits (which would be NaNs for the float
/// path to recompute lane by lane).
fn layers(kind: DotKind) -> Vec<Layer<'static>> {
    let d = data();
    let mut out: Vec<Layer<'static>> = Vec::new();

    let (mut c, a, b) = ([0u8; 1024], d, d);
    out.push((
        "kernel",
        Box::new(move || peak::__kernel(kind, black_box(&mut c), &a, &b)),
    ));

    let mut emu = Emulator::new();
    emu.ldtilecfg(FULL.as_bytes()).unwrap();
    emu.tilezero(0).unwrap();
    emu.tileloadd(1, &d, 64).unwrap();
    emu.tileloadd(2, &d, 64).unwrap();
    out.push((
        "Emulator",
        Box::new(move || match kind {
            DotKind::Tdpbssd => emu.tdpbssd(0, 1, 2).unwrap(),
            _ => emu.tdpbf16ps(0, 1, 2).unwrap(),
        }),
    ));

    // The guard and the typed tiles share this thread's emulator and the layout's
    // configuration, so they hold it in turn: each closure configures (a skipped LDTILECFG, a
    // 64-byte compare, as in any kernel that configures), runs, and drops its guard.
    let config = match kind {
        DotKind::Tdpbssd => &Int8Tile::CONFIG,
        _ => &Bf16Tile::CONFIG,
    };
    out.push((
        "Tiles",
        Box::new(move || {
            let mut t = configure_on(Backend::Emulated, config).unwrap();
            match kind {
                DotKind::Tdpbssd => t.tdpbssd(0, 1, 2).unwrap(),
                _ => t.tdpbf16ps(0, 1, 2).unwrap(),
            }
        }),
    ));

    match kind {
        DotKind::Tdpbssd => {
            let (a, b): ([i8; 1024], [i8; 1024]) = (d.map(|x| x as i8), d.map(|x| x as i8));
            let mut t = configure_typed_on::<Int8Tile>(Backend::Emulated).unwrap();
            t.zero(Int8Tile::c);
            t.load(Int8Tile::a, &a, 64).unwrap();
            t.load(Int8Tile::b, &b, 64).unwrap();
            drop(t);
            out.push((
                "typed",
                Box::new(move || {
                    let mut t = configure_typed_on::<Int8Tile>(Backend::Emulated).unwrap();
                    t.tdpbssd(Int8Tile::c, Int8Tile::a, Int8Tile::b);
                }),
            ));
        }
        _ => {
            let v: Vec<half::bf16> = d
                .chunks_exact(2)
                .map(|p| half::bf16::from_le_bytes([p[0], p[1]]))
                .collect();
            let mut t = configure_typed_on::<Bf16Tile>(Backend::Emulated).unwrap();
            t.zero(Bf16Tile::c);
            t.load(Bf16Tile::a, &v, 32).unwrap();
            t.load(Bf16Tile::b, &v, 32).unwrap();
            drop(t);
            out.push((
                "typed",
                Box::new(move || {
                    let mut t = configure_typed_on::<Bf16Tile>(Backend::Emulated).unwrap();
                    t.tdpbf16ps(Bf16Tile::c, Bf16Tile::a, Bf16Tile::b);
                }),
            ));
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    for kind in [DotKind::Tdpbssd, DotKind::Tdpbf16ps] {
        let mut group = c.benchmark_group(format!("emulated {} layers", kind.mnemonic()));
        for (name, mut run) in layers(kind) {
            group.bench_function(name, |b| b.iter(&mut run));
        }
        group.finish();
    }
}

/// Best nanoseconds per call of each layer, from batches that take turns (so a noisy stretch
/// of a shared machine hits every layer alike).
fn interleaved(layers: &mut [Layer<'_>]) -> Vec<f64> {
    let mut best = vec![f64::INFINITY; layers.len()];
    for _ in 0..40 {
        for (slot, (_, run)) in best.iter_mut().zip(layers.iter_mut()) {
            let t = Instant::now();
            for _ in 0..200 {
                run();
            }
            *slot = slot.min(t.elapsed().as_nanos() as f64 / 200.0);
        }
    }
    best
}

fn ratios() {
    println!(
        "kernel paths: int8 {}, float {}",
        peak::int8_path(),
        peak::float_path()
    );
    for kind in [DotKind::Tdpbssd, DotKind::Tdpbf16ps] {
        let mut layers = layers(kind);
        let best = interleaved(&mut layers);
        let line: Vec<String> = layers
            .iter()
            .zip(&best)
            .map(|((name, _), ns)| format!("{name} {ns:.0} ns ({:.2}x)", ns / best[0]))
            .collect();
        println!("{}: {}", kind.mnemonic(), line.join(", "));
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    ratios();
}
