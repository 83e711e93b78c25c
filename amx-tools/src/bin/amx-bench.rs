//! `amx-bench`: `amx-gemm` against the machine's roofs, measured in the same process.
//!
//! ```text
//! cargo run --release -p amx-tools --bin amx-bench [-- options]
//! ```
//!
//! Without a shape it runs a short demo (int8, u8s8 and bf16 on a few shapes; smaller ones on
//! the emulator) and prints a table: time, GOP/s, percent of a peak the GEMM cannot pass (the
//! tile unit's register-only TDP loop, or on the emulator the cores' own SIMD peak),
//! percent of the bandwidth roofline for shapes bound by reading B, and the check against the
//! reference. All measuring is [`amx_tools::measure`]; this file parses and prints.
//!
//! On the silicon the "peak" and "% peak" columns are paired figures: a short sample of the TDP
//! loop on the same threads runs just before every timed repetition, "peak" is the samples'
//! median and "% peak" the median over repetitions of the repetition's rate over its sample's,
//! so a host that changes speed during the run moves both sides of each ratio alike (see
//! [`amx_tools::measure`], "Paired figures"). The JSON keeps the peak measured once
//! (`peak_gops`, `percent_of_peak`) beside the paired ones (`paired_peak_gops`,
//! `paired_percent_of_peak`).
//!
//! `--scaling` times each case on 1 thread and on `--threads` (default one per core; at least
//! 2) with the repetitions alternating, and prints the median over adjacent pairs of the
//! 1-thread time over the other's ([`Harness::scaling`]).
//!
//! ```text
//! --dtype int8|u8s8|s8u8|u8u8|bf16|fp16|bf8|hf8|bf8hf8|hf8bf8
//!                          precision (default: int8, u8s8 and bf16); bf8 and hf8 are the
//!                          AMX-FP8 products of one format (E5M2, E4M3), bf8hf8 and hf8bf8
//!                          the mixed ones (A's format first)
//! --m M --n N --k K        one shape (missing dimensions default to the others' largest)
//! --threads T              worker threads (default: one per core)
//! --reps R                 timed repetitions (default 5 on the silicon, 3 on the emulator)
//! --backend hardware|emulated|trapped|auto   (default: AMX_BACKEND, else auto)
//! --accumulate             C += A x B instead of C = A x B
//! --c-stores auto|cached|streaming   how C is written (`Gemm::c_stores`; default auto)
//! --scaling                time 1 thread against --threads, repetitions alternating, and
//!                          report the median of the per-pair speed-ups instead of the table
//! --onednn PATH            also time oneDNN's matmul (PATH: its libdnnl.so) in this process,
//!                          repetitions interleaved with amx-gemm's (see amx_tools::onednn)
//! --json                   one JSON object per run instead of the table
//! ```
//!
//! The arguments are parsed by hand: a dozen flags of the same `--name value` form do not need
//! an argument-parsing dependency.

use std::process::ExitCode;

use amx_gemm::{Backend, CStores, Gemm, Mode, PrecisionKind};
use amx_runtime::BackendChoice;
use amx_tools::measure::{Case, Harness, Report, Scaling, PAIRED_PEAK_TIME};

#[derive(Debug, Default)]
struct Args {
    dtype: Option<PrecisionKind>,
    m: Option<usize>,
    n: Option<usize>,
    k: Option<usize>,
    threads: usize,
    reps: Option<usize>,
    backend: Option<BackendChoice>,
    accumulate: bool,
    c_stores: CStores,
    scaling: bool,
    onednn: Option<std::path::PathBuf>,
    json: bool,
    help: bool,
}

const USAGE: &str =
    "usage: amx-bench [--dtype int8|u8s8|s8u8|u8u8|bf16|fp16|bf8|hf8|bf8hf8|hf8bf8] [--m M] [--n N] [--k K] \
                     [--threads T] [--reps R] [--backend hardware|emulated|trapped|auto] \
                     [--accumulate] [--c-stores auto|cached|streaming] [--scaling] \
                     [--onednn PATH] [--json]";

/// `--help`: the usage, and what the two paired figures are.
fn help() -> String {
    format!(
        "{USAGE}\n\n\
         On the silicon, \"peak\" and \"% peak\" are paired: before every timed repetition a \
         {} ms sample of the register-only TDP loop runs on the same threads; \"peak\" is the \
         samples' median, \"% peak\" the median over repetitions of the repetition's GOP/s \
         over its sample's (JSON: paired_peak_gops, paired_percent_of_peak; the peak measured \
         once stays in peak_gops, percent_of_peak).\n\
         --scaling times each case on 1 thread and on --threads (default one per core; at \
         least 2), their repetitions alternating, and reports the median over adjacent pairs \
         of the 1-thread time over the other's (JSON: scaling).",
        PAIRED_PEAK_TIME.as_millis()
    )
}

fn parse(mut words: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args::default();
    while let Some(flag) = words.next() {
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (flag.clone(), None),
        };
        let mut value = |what: &str| {
            inline
                .clone()
                .or_else(|| words.next())
                .ok_or_else(|| format!("{name} needs {what}"))
        };
        let number = |text: String| {
            text.parse::<usize>()
                .map_err(|_| format!("{name}: {text:?} is not a non-negative integer"))
        };
        match name.as_str() {
            "--dtype" => args.dtype = Some(value("a dtype")?.parse().map_err(|e| format!("{e}"))?),
            "--m" => args.m = Some(number(value("a number")?)?),
            "--n" => args.n = Some(number(value("a number")?)?),
            "--k" => args.k = Some(number(value("a number")?)?),
            "--threads" => args.threads = number(value("a number")?)?,
            "--reps" => args.reps = Some(number(value("a number")?)?.max(1)),
            "--backend" => {
                args.backend =
                    Some(BackendChoice::parse(&value("a backend")?).map_err(|e| e.to_string())?)
            }
            "--accumulate" => args.accumulate = true,
            "--c-stores" => {
                args.c_stores = match value("auto, cached or streaming")?.as_str() {
                    "auto" => CStores::Auto,
                    "cached" => CStores::Cached,
                    "streaming" => CStores::Streaming,
                    other => {
                        return Err(format!(
                            "--c-stores: {other:?} is not auto, cached or streaming"
                        ))
                    }
                }
            }
            "--scaling" => args.scaling = true,
            "--onednn" => args.onednn = Some(value("the path of libdnnl.so")?.into()),
            "--json" => args.json = true,
            "-h" | "--help" => args.help = true,
            _ => return Err(format!("unknown option {flag:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// The cases to run: the one shape asked for, or the demo for this backend.
fn cases(args: &Args, backend: Backend) -> Vec<Case> {
    // The demo keeps to the classic three; the others run when asked for (fp16 needs AMX-FP16,
    // the FP8 products AMX-FP8, or the emulator).
    let demo = [
        PrecisionKind::Int8,
        PrecisionKind::U8S8,
        PrecisionKind::Bf16,
    ];
    let dtypes = args.dtype.map_or(demo.to_vec(), |d| vec![d]);
    let given = [args.m, args.n, args.k];
    let shapes: Vec<(usize, usize, usize)> = if given.iter().any(Option::is_some) {
        let fill = given.iter().flatten().copied().max().unwrap_or(0);
        vec![(
            args.m.unwrap_or(fill),
            args.n.unwrap_or(fill),
            args.k.unwrap_or(fill),
        )]
    } else if backend == Backend::Hardware {
        vec![
            (4096, 4096, 4096),
            (1000, 1000, 1000),
            (1, 4096, 4096),
            (16, 4096, 4096),
        ]
    } else {
        vec![
            (1024, 1024, 1024),
            (1000, 1000, 1000),
            (1, 4096, 4096),
            (16, 4096, 4096),
        ]
    };
    let reps = args
        .reps
        .unwrap_or(if backend == Backend::Hardware { 5 } else { 3 });
    let mode = if args.accumulate {
        Mode::Accumulate
    } else {
        Mode::Overwrite
    };
    let mut out = Vec::new();
    for dtype in dtypes {
        for &(m, n, k) in &shapes {
            out.push(Case {
                dtype,
                m,
                n,
                k,
                threads: args.threads,
                reps,
                backend: Some(backend),
                mode,
                c_stores: args.c_stores,
            });
        }
    }
    out
}

fn print_header(backend: Backend, threads: usize) {
    println!("amx-gemm on the {backend} backend, {threads} thread(s)");
    if backend == Backend::Emulated {
        println!(
            "(no usable AMX hardware, or asked for the emulator: every tile instruction is \
             emulated in software; GOP/s are the emulator's, the peak the cores' SIMD peak)"
        );
    } else if amx_trap::assists_silicon() {
        println!(
            "(the trap engine assists the silicon: the instructions of the extensions it lacks \
             and AMX_TRAP_CPU's model has run on the engine's emulator, a signal each, the rest \
             on the silicon; GOP/s are the mix's, the peak the silicon's)"
        );
    } else if amx_trap::is_active() {
        println!(
            "(the CPU has no AMX: the trap engine executes every tile instruction of the \
             silicon's code path on its emulator, a signal or a patched call each; GOP/s and \
             peak are the engine's, not a silicon's)"
        );
    }
    println!(
        "{:<5} {:>16} {:>3} {:>10} {:>9} {:>9} {:>7} {:>8} {:>8}  check",
        "dtype", "M x N x K", "thr", "median", "GOP/s", "peak", "% peak", "% B-roof", "pack"
    );
}

/// The roof a run is measured against, in GOP/s, and its share of it: on the emulator the
/// cores' SIMD peak for the instructions its kernels issue (a software GEMM cannot beat the
/// vector units it runs on), elsewhere the tile unit's register-only TDP loop (the most the
/// unit does with no memory to wait for). Both bound the GEMM by construction. On the silicon
/// the paired figures where measured (the samples beside the repetitions: the host's changes
/// of speed cancel in each pair), else the peak measured once.
fn peak_of(r: &Report) -> Option<(f64, f64)> {
    match r.backend {
        Backend::Hardware => match (r.paired_peak_gops, r.paired_percent_of_peak) {
            (Some(peak), Some(share)) => Some((peak, share)),
            _ => Some((r.peak_gops, r.percent_of_peak())),
        },
        _ => Some((r.simd_peak_gops?, r.percent_of_simd_peak()?)),
    }
}

fn print_row(r: &Report) {
    let c = &r.case;
    let roof = if r.b_bound() {
        format!("{:.1}", 100.0 * r.gops / r.bandwidth_roofline_gops)
    } else {
        "-".to_owned()
    };
    let check = match &r.check {
        Ok(what) => format!("ok ({what})"),
        Err(why) => format!("FAILED: {why}"),
    };
    let (peak, share) = match peak_of(r) {
        Some((peak, share)) => (format!("{peak:.1}"), format!("{share:.1}")),
        None => ("-".to_owned(), "-".to_owned()),
    };
    println!(
        "{:<5} {:>16} {:>3} {:>10} {:>9.1} {:>9} {:>7} {:>8} {:>8}  {check}",
        c.dtype.name(),
        format!("{}x{}x{}", c.m, c.n, c.k),
        r.threads,
        seconds(r.median_s),
        r.gops,
        peak,
        share,
        roof,
        seconds(r.pack_s),
    );
    match &r.peer {
        Some(Ok(p)) => {
            let check = match &p.check {
                Ok(what) => format!("ok ({what})"),
                Err(why) => format!("FAILED: {why}"),
            };
            println!(
                "{:>22} oneDNN matmul, same process, repetitions interleaved: {:.1} GOP/s; \
                 amx-gemm / oneDNN = {:.2} (median of adjacent pairs); C {check}",
                "", p.gops, p.ratio
            );
        }
        Some(Err(why)) => println!("{:>22} oneDNN matmul did not run: {why}", ""),
        None => {}
    }
}

/// `--scaling`: every case on 1 thread against `threads`, one line (or JSON object) each.
fn run_scaling(args: &Args, backend: Backend, threads: usize, harness: &mut Harness) -> ExitCode {
    if threads < 2 {
        eprintln!(
            "--scaling compares 1 thread with more: --threads resolves to {threads}; give 2 or \
             more"
        );
        return ExitCode::from(2);
    }
    if args.onednn.is_some() {
        eprintln!("--scaling times amx-gemm alone; leave out --onednn");
        return ExitCode::from(2);
    }
    if !args.json {
        println!(
            "amx-gemm on the {backend} backend, 1 thread against {threads}, repetitions \
             alternating"
        );
        println!(
            "{:<5} {:>16} {:>10} {:>9} {:>10} {:>9} {:>8}  check",
            "dtype",
            "M x N x K",
            "1 thr",
            "GOP/s",
            format!("{threads} thr"),
            "GOP/s",
            "speed-up"
        );
    }
    let mut failed = false;
    for case in cases(args, backend) {
        match harness.scaling(&case) {
            Ok(s) => {
                failed |= s.check.is_err();
                if args.json {
                    match serde_json::to_string(&s) {
                        Ok(line) => println!("{line}"),
                        Err(e) => {
                            failed = true;
                            eprintln!("{} {}x{}x{}: {e}", case.dtype, case.m, case.n, case.k);
                        }
                    }
                } else {
                    print_scaling_row(&s);
                }
            }
            Err(e) => {
                failed = true;
                eprintln!("{} {}x{}x{}: {e}", case.dtype, case.m, case.n, case.k);
            }
        }
    }
    if !args.json {
        println!();
        println!(
            "speed-up: the median over adjacent pairs of (1-thread time / {threads}-thread time); \
             the two alternate, which runs first swapped every pair, so each pair ran under the \
             same load of the host (the times are medians of their own)"
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn print_scaling_row(s: &Scaling) {
    let c = &s.case;
    let check = match &s.check {
        Ok(what) => format!("ok ({what})"),
        Err(why) => format!("FAILED: {why}"),
    };
    println!(
        "{:<5} {:>16} {:>10} {:>9.1} {:>10} {:>9.1} {:>8}  {check}",
        c.dtype.name(),
        format!("{}x{}x{}", c.m, c.n, c.k),
        seconds(s.one_median_s),
        s.one_gops,
        seconds(s.median_s),
        s.gops,
        format!("{:.2}x", s.speedup),
    );
}

fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        println!("{}", help());
        return ExitCode::SUCCESS;
    }
    // `--backend trapped` (or AMX_BACKEND=trapped) installs the trap engine through the hook:
    // on a CPU without AMX it runs everything, on AMX silicon that lacks extensions of the
    // CPU it models (AMX_TRAP_CPU) it assists the silicon.
    amx_trap::register();
    let backend = match args.backend.map_or_else(
        || amx_runtime::backend().map_err(|e| e.to_string()),
        |c| c.resolve().map_err(|e| e.to_string()),
    ) {
        Ok(b) => b,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::FAILURE;
        }
    };
    let threads = Gemm::new().threads(args.threads).thread_count();
    let mut harness = Harness::new();
    if let Some(path) = &args.onednn {
        match amx_tools::onednn::Peer::open(path) {
            Ok(peer) => harness.peer = Some(peer),
            Err(why) => {
                eprintln!("--onednn {}: {why}", path.display());
                return ExitCode::FAILURE;
            }
        }
    }
    if args.scaling {
        return run_scaling(&args, backend, threads, &mut harness);
    }
    if !args.json {
        print_header(backend, threads);
    }
    let mut failed = false;
    let mut reports = Vec::new();
    for case in cases(&args, backend) {
        match harness.run(&case) {
            Ok(r) => {
                failed |= r.check.is_err();
                failed |= matches!(&r.peer, Some(Ok(p)) if p.check.is_err());
                if args.json {
                    match serde_json::to_string(&r) {
                        Ok(line) => println!("{line}"),
                        Err(e) => {
                            failed = true;
                            eprintln!(
                                "{} {}x{}x{}: {e}",
                                r.case.dtype, r.case.m, r.case.n, r.case.k
                            );
                        }
                    }
                } else {
                    print_row(&r);
                }
                reports.push(r);
            }
            Err(e) => {
                failed = true;
                eprintln!("{} {}x{}x{}: {e}", case.dtype, case.m, case.n, case.k);
            }
        }
    }
    if !args.json && !reports.is_empty() {
        println!();
        if backend == Backend::Emulated {
            println!(
                "peak: the cores' own SIMD peak for the instructions the emulator's kernels \
                 issue (VPDPBUSD or VPMADDWD for the integer products, VFMADD231PS for the \
                 floating-point ones, VDPBF16PS for bf16 where the CPU's passes the emulator's \
                 check), all threads at once; \"-\" where the emulator runs its \
                 portable kernels, which have no such peak"
            );
            for r in &reports {
                // The FP8 products have no fused 2x2 kernel: their GEMM runs the same
                // per-instruction kernel on the packed operands, and the loop's rate is a roof
                // for it.
                let why = if r.case.dtype.is_fp8() {
                    "the GEMM runs the same kernel once per product (there is no fused FP8 \
                     kernel), so this rate bounds it"
                } else {
                    "no roof, as the GEMM multiplies whole 2x2 blocks of tiles per call and \
                     outruns it"
                };
                println!(
                    "  {} {}x{}x{}: a loop of single emulated TDP instructions runs at {:.1} \
                     GOP/s; {why}",
                    r.case.dtype, r.case.m, r.case.n, r.case.k, r.peak_gops
                );
            }
        } else if reports.iter().any(|r| r.paired_percent_of_peak.is_some()) {
            println!(
                "peak: register-only TDP loop (4 independent C tiles, A/B loaded once, no \
                 memory), all threads at once, sampled for {} ms just before every timed \
                 repetition (excluded from its time); the column is the samples' median, \
                 \"% peak\" the median over repetitions of the repetition's GOP/s over its own \
                 sample's, so the host's changes of speed cancel in each pair",
                PAIRED_PEAK_TIME.as_millis()
            );
            for r in &reports {
                println!(
                    "  {} {}x{}x{}: the peak measured once in this process: {:.1} GOP/s, {:.1}% \
                     (the roofline's roof)",
                    r.case.dtype,
                    r.case.m,
                    r.case.n,
                    r.case.k,
                    r.peak_gops,
                    r.percent_of_peak()
                );
            }
        } else {
            println!(
                "peak: register-only TDP loop (4 independent C tiles, A/B loaded once, no \
                 memory), all threads at once, after a warm-up; excluded from the GEMM timings"
            );
        }
        for r in &reports {
            if r.b_bound() {
                println!(
                    "{} {}x{}x{}: bound by reading B: {:.1} GB/s read bandwidth -> roofline \
                     {:.1} GOP/s",
                    r.case.dtype,
                    r.case.m,
                    r.case.n,
                    r.case.k,
                    r.bandwidth_gbps,
                    r.bandwidth_roofline_gops
                );
            }
        }
        let warm: Vec<String> = reports
            .iter()
            .map(|r| {
                format!(
                    "{} {}x{}x{}: first run {}, {} warm-up run(s) in {}",
                    r.case.dtype,
                    r.case.m,
                    r.case.n,
                    r.case.k,
                    seconds(r.first_run_s),
                    r.warmup_runs,
                    seconds(r.warmup_s)
                )
            })
            .collect();
        println!("warm-up before timing:");
        for w in warm {
            println!("  {w}");
        }
        println!(
            "check: int8/u8s8 exact against an i32 reference; bf16 against an f64 sum of the \
             same bf16 inputs, |err| <= gamma(ceil(K/32)+16) * (|c0| + sum|a||b|) + tiny, \
             gamma(h) = h*2^-24/(1-h*2^-24); fp16 likewise; bf8/hf8 with \
             h = ceil(K/64)+17 (derivation: amx_gemm::reference)"
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Result<Args, String> {
        parse(text.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn parses_every_option() {
        let a = args("--dtype bf16 --m 5 --n=6 --k 7 --threads 2 --reps 9 --backend emulated --json --accumulate")
            .unwrap();
        assert_eq!(a.dtype, Some(PrecisionKind::Bf16));
        assert_eq!((a.m, a.n, a.k), (Some(5), Some(6), Some(7)));
        assert_eq!((a.threads, a.reps), (2, Some(9)));
        assert_eq!(a.backend, Some(BackendChoice::Emulated));
        assert!(a.json && a.accumulate);
        assert_eq!(a.c_stores, CStores::Auto);
        for (name, stores) in [
            ("auto", CStores::Auto),
            ("cached", CStores::Cached),
            ("streaming", CStores::Streaming),
        ] {
            assert_eq!(
                args(&format!("--c-stores {name}")).unwrap().c_stores,
                stores
            );
        }
        for (name, kind) in [
            ("bf8", PrecisionKind::Bf8Bf8),
            ("hf8", PrecisionKind::Hf8Hf8),
            ("bf8hf8", PrecisionKind::Bf8Hf8),
            ("hf8bf8", PrecisionKind::Hf8Bf8),
        ] {
            assert_eq!(args(&format!("--dtype {name}")).unwrap().dtype, Some(kind));
        }
    }

    #[test]
    fn rejects_bad_options() {
        assert!(args("--m").is_err());
        assert!(args("--m -3").is_err());
        assert!(args("--dtype fp8").is_err());
        assert!(args("--frobnicate").is_err());
        assert!(args("--c-stores nt").is_err());
        assert!(args("--c-stores").is_err());
    }

    #[test]
    fn help_is_not_an_error() {
        assert!(args("--help").unwrap().help);
        assert!(args("--m 3 -h").unwrap().help);
    }

    fn report(backend: Backend, gops: f64, peak: f64, simd: Option<f64>) -> Report {
        Report {
            case: Case {
                dtype: PrecisionKind::Int8,
                m: 1,
                n: 1,
                k: 1,
                threads: 1,
                reps: 1,
                backend: Some(backend),
                mode: Mode::Overwrite,
                c_stores: CStores::Auto,
            },
            threads: 1,
            backend,
            pack_s: 0.0,
            median_s: 1.0,
            min_s: 1.0,
            median_cpu_s: None,
            gops,
            peak_gops: peak,
            paired_peak_gops: None,
            paired_percent_of_peak: None,
            bandwidth_gbps: 1.0,
            bandwidth_roofline_gops: f64::INFINITY,
            roofline_gops: peak,
            simd_peak_gops: simd,
            warmup_runs: 1,
            warmup_s: 0.0,
            first_run_s: 0.0,
            timed_loads: 0,
            check: Ok(String::new()),
            peer: None,
        }
    }

    /// The one "% peak" column: the TDP loop on the silicon, the SIMD peak on the emulator
    /// (whose single-instruction TDP loop the GEMM outruns), nothing where neither exists.
    #[test]
    fn the_peak_column_is_a_roof() {
        let hw = report(Backend::Hardware, 50.0, 200.0, None);
        assert_eq!(peak_of(&hw), Some((200.0, 25.0)));
        // The emulated GEMM at 150 GOP/s beats its TDP loop's 100, not the SIMD peak's 300.
        let emu = report(Backend::Emulated, 150.0, 100.0, Some(300.0));
        assert_eq!(peak_of(&emu), Some((300.0, 50.0)));
        let portable = report(Backend::Emulated, 1.0, 2.0, None);
        assert_eq!(peak_of(&portable), None);
    }

    /// On the silicon the paired figures replace the peak measured once where they exist.
    #[test]
    fn the_silicon_column_is_paired() {
        let mut hw = report(Backend::Hardware, 50.0, 200.0, None);
        hw.paired_peak_gops = Some(100.0);
        hw.paired_percent_of_peak = Some(48.0);
        assert_eq!(peak_of(&hw), Some((100.0, 48.0)));
        // Only on the silicon: the emulator keeps its SIMD peak.
        let mut emu = report(Backend::Emulated, 150.0, 100.0, Some(300.0));
        emu.paired_percent_of_peak = Some(1.0);
        assert_eq!(peak_of(&emu), Some((300.0, 50.0)));
    }

    #[test]
    fn parses_scaling() {
        assert!(args("--scaling --threads 2").unwrap().scaling);
        assert!(!args("--threads 2").unwrap().scaling);
        assert!(help().starts_with(USAGE));
    }

    #[test]
    fn one_shape_fills_missing_dimensions() {
        let a = args("--m 1 --k 4096").unwrap();
        let c = cases(&a, Backend::Emulated);
        assert_eq!(c.len(), 3);
        assert_eq!((c[0].m, c[0].n, c[0].k), (1, 4096, 4096));
    }
}
