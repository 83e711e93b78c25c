//! GEMM throughput against the in-process tile peak: square sizes 256 to 4096 and the skinny
//! inference shapes M = 1 and M = 16 with N = K = 4096, int8 and bf16, on 1 and 2 threads.
//!
//! `cargo bench -p amx-tools --bench gemm`. Criterion times every case; the bench then prints a
//! summary (median GOP/s, percent of the peak and of the bandwidth roofline that
//! `amx_tools::measure` measures in the same process) and draws `amx-gemm/docs/gemm.svg`
//! (throughput against size, with the peak lines). On the emulator the square sizes stop at
//! 1024 so that the run takes a few minutes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amx_gemm::reference::{self, Outputs};
use amx_gemm::{Backend, Gemm, GemmError, PackedB, Precision, PrecisionKind};
use amx_test_support::random;
use amx_tools::measure::Harness;
use criterion::{BenchmarkId, Criterion, Throughput};
use plotters::prelude::*;

/// One benchmarked shape and its measured median time per multiply.
#[derive(Clone, Debug)]
struct Point {
    dtype: PrecisionKind,
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    median_s: f64,
}

impl Point {
    fn gops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64 / self.median_s / 1e9
    }
}

/// Benchmarks one shape and records its median time.
fn bench_shape<P: Precision>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    (m, n, k): (usize, usize, usize),
    threads: usize,
    points: &Arc<Mutex<Vec<Point>>>,
) -> Result<(), GemmError>
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let a: Vec<P::A> = random(m * k, 1);
    let b: Vec<P::B> = random(k * n, 2);
    let packed = PackedB::<P>::pack(&b, k, n, n)?;
    let mut c = vec![P::C::default(); m * n];
    let gemm = Gemm::new().threads(threads);
    gemm.run(m, &a, k, &packed, &mut c, n)?; // first use: threads, configurations
    let samples = Arc::new(Mutex::new(Vec::new()));
    group.throughput(Throughput::Elements(2 * (m * n * k) as u64));
    group.bench_function(BenchmarkId::new(label, format!("t{threads}")), |bencher| {
        bencher.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                // A failed multiply has no time worth recording: stop the bench loudly.
                if let Err(e) = gemm.run(m, &a, k, &packed, &mut c, n) {
                    panic!("{label} {m}x{n}x{k}: {e}");
                }
            }
            let elapsed = start.elapsed();
            if let Ok(mut s) = samples.lock() {
                s.push(elapsed.as_secs_f64() / iters.max(1) as f64);
            }
            elapsed
        })
    });
    // The timed runs must also be right: C holds the last one (C = A x B).
    let check = reference::verify::<P>(m, n, k, &a, k, &b, n, None, &c, n, Outputs::Sampled(1024));
    if let Err(e) = check {
        panic!("{label} {m}x{n}x{k}: wrong result: {e}");
    }
    let times = samples.lock().map(|s| s.clone()).unwrap_or_default();
    if let Some(median_s) = amx_tools::median(&times) {
        if let Ok(mut p) = points.lock() {
            p.push(Point {
                dtype: P::KIND,
                threads,
                m,
                n,
                k,
                median_s,
            });
        }
    }
    Ok(())
}

fn main() {
    let backend = match Gemm::new().resolved_backend() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("no backend: {e}");
            return;
        }
    };
    let squares: &[usize] = match backend {
        Backend::Hardware => &[256, 512, 1024, 2048, 4096],
        _ => &[256, 512, 1024],
    };
    println!("backend: {backend}");
    if backend == Backend::Emulated {
        println!(
            "emulator: no usable AMX hardware (or AMX_BACKEND=emulated); square sizes capped at \
             1024 so the bench finishes in a few minutes; numbers are the emulator's"
        );
    }
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let points = Arc::new(Mutex::new(Vec::new()));
    let threads = [1, 2];
    for dtype in [PrecisionKind::Int8, PrecisionKind::Bf16] {
        let mut group = criterion.benchmark_group(format!("gemm_{}", dtype.name()));
        for &t in &threads {
            let mut shapes: Vec<(String, (usize, usize, usize))> = squares
                .iter()
                .map(|&s| (format!("square_{s}"), (s, s, s)))
                .collect();
            shapes.push(("m1_n4096_k4096".into(), (1, 4096, 4096)));
            shapes.push(("m16_n4096_k4096".into(), (16, 4096, 4096)));
            for (label, shape) in shapes {
                let r = match dtype {
                    PrecisionKind::Int8 => {
                        bench_shape::<amx_gemm::Int8>(&mut group, &label, shape, t, &points)
                    }
                    PrecisionKind::U8S8 => {
                        bench_shape::<amx_gemm::U8S8>(&mut group, &label, shape, t, &points)
                    }
                    PrecisionKind::Bf16 => {
                        bench_shape::<amx_gemm::Bf16>(&mut group, &label, shape, t, &points)
                    }
                    // The precisions benchmarked are the loop's.
                    _ => Ok(()),
                };
                if let Err(e) = r {
                    eprintln!("{label}: {e}");
                }
            }
        }
        group.finish();
    }
    criterion.final_summary();

    let points = points.lock().map(|p| p.clone()).unwrap_or_default();
    let mut harness = Harness::new();
    println!();
    println!("summary ({backend}): median of the criterion samples");
    println!(
        "{:<5} {:>16} {:>3} {:>10} {:>9} {:>9} {:>7} {:>9}",
        "dtype", "M x N x K", "thr", "median", "GOP/s", "peak", "% peak", "% B-roof"
    );
    let mut peaks = Vec::new();
    for p in &points {
        let peak = match harness.peak(p.dtype, p.threads, Some(backend)) {
            Ok(peak) => peak.gops,
            Err(e) => {
                eprintln!("peak: {e}");
                continue;
            }
        };
        peaks.push((p.dtype, p.threads, peak));
        let b_bytes = p.k * p.n * p.dtype.input_bytes();
        let roof = harness
            .bandwidth(b_bytes, p.threads)
            .map(|bw| bw * 2.0 * (p.m * p.n * p.k) as f64 / b_bytes as f64)
            .unwrap_or(f64::INFINITY);
        let roof_text = if roof < peak {
            format!("{:.1}", 100.0 * p.gops() / roof)
        } else {
            "-".into()
        };
        println!(
            "{:<5} {:>16} {:>3} {:>8.3}ms {:>9.1} {:>9.1} {:>7.1} {:>9}",
            p.dtype.name(),
            format!("{}x{}x{}", p.m, p.n, p.k),
            p.threads,
            p.median_s * 1e3,
            p.gops(),
            peak,
            100.0 * p.gops() / peak,
            roof_text
        );
    }
    // The chart documents amx-gemm, so it lives beside that crate.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../amx-gemm/docs/gemm.svg");
    match chart(path, backend, &points, &peaks) {
        Ok(()) => println!("chart: {path}"),
        Err(e) => eprintln!("chart: {e}"),
    }
}

/// Throughput against square size, one panel per precision, one line per thread count, with
/// the measured peak of each thread count as a dashed line.
fn chart(
    path: &str,
    backend: Backend,
    points: &[Point],
    peaks: &[(PrecisionKind, usize, f64)],
) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = std::path::Path::new(path).parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (1100, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("amx-gemm: square GEMM throughput ({backend} backend)"),
        ("sans-serif", 20),
    )?;
    let panels = root.split_evenly((1, 2));
    let colors = [BLUE, RED];
    for (panel, dtype) in panels
        .iter()
        .zip([PrecisionKind::Int8, PrecisionKind::Bf16])
    {
        let squares: Vec<&Point> = points
            .iter()
            .filter(|p| p.dtype == dtype && p.m == p.n && p.n == p.k)
            .collect();
        let top = peaks
            .iter()
            .filter(|(d, _, _)| *d == dtype)
            .map(|(_, _, g)| *g)
            .chain(squares.iter().map(|p| p.gops()))
            .fold(1.0f64, f64::max)
            * 1.15;
        // x is log2 of the size, labelled with the size.
        let max_log = squares
            .iter()
            .map(|p| (p.m as f64).log2())
            .fold(12.0f64, f64::max);
        let (x0, x1) = (7.5, max_log + 0.5);
        let mut chart = ChartBuilder::on(panel)
            .caption(dtype.name(), ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("M = N = K")
            .y_desc("GOP/s")
            .x_labels((x1 - x0) as usize + 1)
            .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
            .light_line_style(WHITE)
            .draw()?;
        for (i, t) in [1usize, 2].into_iter().enumerate() {
            let color = colors[i % colors.len()];
            let mut line: Vec<(f64, f64)> = squares
                .iter()
                .filter(|p| p.threads == t)
                .map(|p| ((p.m as f64).log2(), p.gops()))
                .collect();
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(line.clone(), color.stroke_width(2)))?
                .label(format!("{t} thread(s)"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(
                line.iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )?;
            if let Some((_, _, peak)) = peaks.iter().find(|(d, th, _)| *d == dtype && *th == t) {
                let dash = (x1 - x0) / 80.0;
                let dashes = (0..40).map(|j| {
                    let from = x0 + 2.0 * j as f64 * dash;
                    PathElement::new(
                        vec![(from, *peak), (from + dash, *peak)],
                        color.stroke_width(1),
                    )
                });
                chart
                    .draw_series(dashes)?
                    .label(format!("peak, {t} thread(s): {peak:.0}"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 8, y)], color));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
