//! Fused epilogues against the plain GEMM of the same shape: a quantized u8s8 linear layer
//! (zero point, per-channel scales, bias, GELU, bf16 output) and a bf16 one (bias, GELU, bf16
//! output), at M = 1 and 16 with N = K = 2048 and at the square 512 (1024 on the silicon), on
//! 2 threads.
//!
//! `cargo bench -p amx-gemm --bench linear`. Criterion times each pair; the bench then prints
//! each shape's fused time over the plain time (best samples), the epilogue's overhead.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use amx_gemm::{
    bf16, Activation, Backend, Bf16, Epilogue, Gemm, GemmError, PackedB, Precision, WeightScale,
    U8S8,
};
use amx_gemm::{MatMut, MatRef};
use amx_test_support::random;
use criterion::{BenchmarkId, Criterion, Throughput};

/// Best seconds per call, by label.
type Times = Arc<Mutex<Vec<(String, f64)>>>;

/// The least of the samples' times per call: the sample least disturbed by other load, which
/// is what comparing two kernels needs (criterion's own report has the full distribution).
fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Times `f` under criterion as `group/label`, and records the best time per call.
fn timed(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: String,
    times: &Times,
    mut f: impl FnMut() -> Result<(), GemmError>,
) {
    let samples = Arc::new(Mutex::new(Vec::new()));
    group.bench_function(BenchmarkId::from_parameter(&label), |bencher| {
        bencher.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                if let Err(e) = f() {
                    panic!("{label}: {e}");
                }
            }
            let elapsed = start.elapsed();
            if let Ok(mut s) = samples.lock() {
                s.push(elapsed.as_secs_f64() / iters.max(1) as f64);
            }
            elapsed
        })
    });
    let s = samples.lock().map(|s| s.clone()).unwrap_or_default();
    if let Ok(mut t) = times.lock() {
        t.push((label, best(&s)));
    }
}

/// The plain GEMM and the fused layer of one shape.
fn pair<P: Precision, O: amx_gemm::Output>(
    c: &mut Criterion,
    name: &str,
    (m, n, k): (usize, usize, usize),
    times: &Times,
    make: impl for<'x> Fn(&'x [f32], &'x [f32]) -> Epilogue<'x>,
) -> Result<(), GemmError>
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let a: Vec<P::A> = random(m * k, 1);
    let b: Vec<P::B> = random(k * n, 2);
    let scales: Vec<f32> = (0..n).map(|j| 0.002 + 0.0001 * (j % 13) as f32).collect();
    let bias: Vec<f32> = (0..n).map(|j| (j % 7) as f32 * 0.1 - 0.3).collect();
    let w = PackedB::<P>::pack(&b, k, n, n)?;
    let e = make(&scales, &bias);
    let gemm = Gemm::new().threads(2);
    let mut acc = vec![P::C::default(); m * n];
    let mut out = vec![O::default(); m * n];
    let mut group = c.benchmark_group(format!("linear/{name}/{m}x{n}x{k}"));
    group.throughput(Throughput::Elements(2 * (m * n * k) as u64));
    group.sample_size(10);
    timed(
        &mut group,
        format!("{name} {m}x{n}x{k} plain"),
        times,
        || gemm.run(m, &a, k, &w, &mut acc, n).map(|_| ()),
    );
    timed(
        &mut group,
        format!("{name} {m}x{n}x{k} fused"),
        times,
        || {
            gemm.run_with(MatRef::new(&a, m, k), &w, MatMut::new(&mut out, m, n), &e)
                .map(|_| ())
        },
    );
    group.finish();
    Ok(())
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let hardware = matches!(amx_runtime::backend(), Ok(Backend::Hardware));
    let square = if hardware { 1024 } else { 512 };
    let times: Times = Arc::default();
    for shape in [(1, 2048, 2048), (16, 2048, 2048), (square, square, square)] {
        let q = pair::<U8S8, bf16>(&mut c, "u8s8", shape, &times, |s, b| {
            Epilogue::new()
                .quantized(0.02, 128, WeightScale::Channel(s))
                .bias(b)
                .activation(Activation::GeluTanh)
        });
        let f = pair::<Bf16, bf16>(&mut c, "bf16", shape, &times, |_, b| {
            Epilogue::new().bias(b).activation(Activation::GeluErf)
        });
        if let Err(e) = q.and(f) {
            eprintln!("{shape:?}: {e}");
        }
    }
    c.final_summary();
    let times = times.lock().map(|t| t.clone()).unwrap_or_default();
    println!("epilogue overhead (fused time / plain time - 1, best samples of the same run):");
    for pair in times.chunks(2) {
        if let [(plain, tp), (_, tf)] = pair {
            let label = plain.trim_end_matches(" plain");
            println!("  {label}: {:+.1}%", 100.0 * (tf / tp - 1.0));
        }
    }
}
