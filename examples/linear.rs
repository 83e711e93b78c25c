//! Inference linear layers with fused epilogues: `cargo run --release --example linear`.
//!
//! Two layers, each at a skinny (M = 1 and M = 16) and a square shape:
//!
//! - **u8s8**: u8 activations with a zero point, s8 weights with per-channel scales (packed
//!   once, column sums included), f32 bias, GELU (tanh form), bf16 output;
//! - **bf16**: bf16 activations and weights, f32 bias, GELU (erf form), bf16 output.
//!
//! For each it prints the time (best of the repetitions) and GOP/s of the layer, the plain GEMM
//! of the same shape (`Gemm::run` into the i32 / f32 accumulator) measured in the same run with
//! repetitions interleaved, the fused epilogue's overhead against it, and the check of every output
//! against the `f64` reference within the documented bound
//! (`amx_gemm::reference::verify_linear`).
//!
//! ```text
//! --backend hardware|emulated|trapped|auto   (default: AMX_BACKEND, else auto)
//! --threads T      worker threads (default: one per core)
//! --reps R         timed repetitions of each (default 9)
//! --quick          small shapes (for slow backends such as the trap engine)
//! --json           one JSON object per case
//! ```

use std::process::ExitCode;

use amx_examples::{best_of_interleaved, values, Flags};
use amx_gemm::epilogue::Output;
use amx_gemm::reference::{verify_linear, VerifyError};
use amx_gemm::{
    bf16, Activation, BRef, Backend, Bf16, Epilogue, Gemm, GemmError, MatMut, MatRef, PackedB,
    Precision, WeightScale, U8S8,
};
use amx_runtime::BackendChoice;
use serde::Serialize;

#[derive(Debug, Default, PartialEq)]
struct Args {
    backend: Option<BackendChoice>,
    threads: usize,
    reps: Option<usize>,
    quick: bool,
    json: bool,
    help: bool,
}

const USAGE: &str = "usage: linear [--backend hardware|emulated|trapped|auto] [--threads T] \
                     [--reps R] [--quick] [--json]";

fn parse(words: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args::default();
    let mut flags = Flags::new(words);
    while let Some((name, inline)) = flags.next_flag() {
        let mut value = |what: &str| flags.value(&name, &inline, what);
        let number = |text: String| {
            text.parse::<usize>()
                .map_err(|_| format!("{name}: {text:?} is not a non-negative integer"))
        };
        match name.as_str() {
            "--backend" => {
                args.backend =
                    Some(BackendChoice::parse(&value("a backend")?).map_err(|e| e.to_string())?)
            }
            "--threads" => args.threads = number(value("a count")?)?,
            "--reps" => args.reps = Some(number(value("a count")?)?.max(1)),
            "--quick" => args.quick = true,
            "--json" => args.json = true,
            "-h" | "--help" => args.help = true,
            _ => return Err(format!("unknown option {name}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// One measured case.
#[derive(Clone, Debug, PartialEq)]
struct Report {
    dtype: &'static str,
    m: usize,
    n: usize,
    k: usize,
    backend: Backend,
    threads: usize,
    fused_s: f64,
    plain_s: f64,
    check: Result<f64, String>,
}

impl Report {
    fn ops(&self) -> f64 {
        2.0 * (self.m * self.n * self.k) as f64
    }

    fn gops(&self) -> f64 {
        self.ops() / self.fused_s / 1e9
    }

    fn plain_gops(&self) -> f64 {
        self.ops() / self.plain_s / 1e9
    }

    /// The fused layer's extra time over the plain GEMM, as a fraction of the plain GEMM's.
    fn overhead(&self) -> f64 {
        self.fused_s / self.plain_s - 1.0
    }

    fn check_text(&self) -> String {
        match &self.check {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("FAILED: {e}"),
        }
    }

    /// The JSON line of `--json` (its field names are what scripts read).
    fn record(&self) -> Record {
        Record {
            dtype: self.dtype,
            m: self.m,
            n: self.n,
            k: self.k,
            backend: self.backend.to_string(),
            threads: self.threads,
            gops: self.gops(),
            plain_gemm_gops: self.plain_gops(),
            epilogue_overhead: self.overhead(),
            check: self.check_text(),
        }
    }
}

/// One case in `--json`. Non-finite figures print as `null`.
#[derive(Serialize)]
struct Record {
    dtype: &'static str,
    m: usize,
    n: usize,
    k: usize,
    backend: String,
    threads: usize,
    gops: f64,
    plain_gemm_gops: f64,
    epilogue_overhead: f64,
    check: String,
}

/// Runs one layer of precision `P` with output `O`: `epilogue` built from the per-channel
/// data by `make`.
#[allow(clippy::too_many_arguments)]
fn layer<P: Precision, O: Output>(
    dtype: &'static str,
    (m, n, k): (usize, usize, usize),
    gemm: &Gemm,
    reps: usize,
    make: impl for<'x> Fn(&'x [f32], &'x [f32]) -> Epilogue<'x>,
) -> Result<Report, GemmError> {
    // Activations and weights over most of their types' ranges (bf16: -1..1).
    let int = P::KIND.is_integer();
    let a: Vec<P::A> = values(m * k, 11, if int { (0.0, 255.0) } else { (-1.0, 1.0) });
    let b: Vec<P::B> = values(k * n, 12, if int { (-127.0, 127.0) } else { (-1.0, 1.0) });
    let scales: Vec<f32> = (0..n).map(|j| 0.002 + 0.0001 * (j % 13) as f32).collect();
    let bias: Vec<f32> = (0..n).map(|j| (j % 7) as f32 * 0.1 - 0.3).collect();
    let weights = PackedB::<P>::pack(&b, k, n, n)?;
    let epilogue = make(&scales, &bias);
    let mut acc = vec![P::C::default(); m * n];
    let mut out = vec![O::default(); m * n];
    let (plain_s, fused_s) = {
        let acc = &mut acc;
        let out_ref = &mut out;
        let w = &weights;
        let e = &epilogue;
        let a = &a;
        let plain = move || gemm.run(m, a, k, w, acc, n).map(|_| ());
        let fused = move || {
            let out = MatMut::new(&mut out_ref[..], m, n);
            gemm.run_with(MatRef::new(a, m, k), w, out, e).map(|_| ())
        };
        // Interleaved, so drifts in clock or load hit both alike; compared at their best
        // runs, the ones least disturbed by other load on the machine.
        best_of_interleaved(reps, plain, fused)?
    };
    let (a, b, out) = (
        MatRef::new(&a, m, k),
        BRef::k_by_n(&b, k, n),
        MatRef::new(&out, m, n),
    );
    let check = match verify_linear::<P, O>(a, b, &epilogue, out) {
        Ok(verified) => Ok(verified.worst_ratio),
        Err(VerifyError::Input(e)) => return Err(e),
        Err(mismatch) => Err(mismatch.to_string()),
    };
    Ok(Report {
        dtype,
        m,
        n,
        k,
        backend: gemm.resolved_backend()?,
        threads: gemm.thread_count(),
        fused_s,
        plain_s,
        check,
    })
}

/// The shapes: M = 1 and 16 at N = K = `skinny`, and the square `square`^3.
fn shapes(skinny: usize, square: usize) -> [(usize, usize, usize); 3] {
    [
        (1, skinny, skinny),
        (16, skinny, skinny),
        (square, square, square),
    ]
}

/// Both layers at every shape.
fn run_all(gemm: &Gemm, reps: usize, sizes: (usize, usize)) -> Vec<Result<Report, String>> {
    let mut out = Vec::new();
    for shape in shapes(sizes.0, sizes.1) {
        let label = |e: GemmError| format!("{shape:?}: {e}");
        out.push(
            layer::<U8S8, bf16>("u8s8", shape, gemm, reps, |scales, bias| {
                Epilogue::new()
                    .quantized(0.02, 128, WeightScale::Channel(scales))
                    .bias(bias)
                    .activation(Activation::GeluTanh)
            })
            .map_err(label),
        );
        out.push(
            layer::<Bf16, bf16>("bf16", shape, gemm, reps, |_, bias| {
                Epilogue::new().bias(bias).activation(Activation::GeluErf)
            })
            .map_err(label),
        );
    }
    out
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
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
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
    let gemm = Gemm::new().threads(args.threads).backend(backend);
    // The emulator runs the tiles in software: smaller shapes keep the run to seconds.
    let sizes = match (args.quick, backend) {
        (true, _) => (256, 64),
        (false, Backend::Hardware) => (4096, 1024),
        (false, _) => (2048, 512),
    };
    let reps = args.reps.unwrap_or(9);
    if !args.json {
        println!(
            "quantized linear layers on the {backend} backend, {} thread(s); best of {reps} \
             interleaved runs",
            gemm.thread_count()
        );
        println!(
            "{:<5} {:>5} {:>5} {:>5} {:>10} {:>9} {:>10} {:>9} {:>9}  check",
            "dtype", "M", "N", "K", "time", "GOP/s", "plain", "GOP/s", "overhead"
        );
    }
    let mut failed = false;
    for r in run_all(&gemm, reps, sizes) {
        match r {
            Ok(r) => {
                failed |= r.check.is_err();
                if args.json {
                    match serde_json::to_string(&r.record()) {
                        Ok(line) => println!("{line}"),
                        Err(e) => {
                            failed = true;
                            eprintln!("{} {}x{}x{}: {e}", r.dtype, r.m, r.n, r.k);
                        }
                    }
                } else {
                    println!(
                        "{:<5} {:>5} {:>5} {:>5} {:>8.3}ms {:>9.2} {:>8.3}ms {:>9.2} {:>8.1}%  {}",
                        r.dtype,
                        r.m,
                        r.n,
                        r.k,
                        r.fused_s * 1e3,
                        r.gops(),
                        r.plain_s * 1e3,
                        r.plain_gops(),
                        100.0 * r.overhead(),
                        r.check_text()
                    );
                }
            }
            Err(e) => {
                failed = true;
                eprintln!("{e}");
            }
        }
    }
    if !args.json {
        println!();
        println!(
            "u8s8: u8 activations (scale 0.02, zero point 128), s8 weights with per-channel \
             scales, f32 bias, GELU (tanh), bf16 output"
        );
        println!("bf16: bf16 activations and weights, f32 bias, GELU (erf), bf16 output");
        println!(
            "plain: the GEMM of the same shape into the i32/f32 accumulator, in the same run; \
             overhead = fused time / plain time - 1"
        );
        println!(
            "check: every output against an f64 reference (exact integer product or f64 sum, \
             exact scales and activations) within the bound of amx_gemm::reference \
             (f32 steps, activation approximation <= 2^-20 (1 + |x|), bf16 rounding 2^-8)"
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

    fn args(line: &str) -> Result<Args, String> {
        parse(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn options_parse() {
        let a = args("--backend emulated --threads=2 --reps 3 --quick --json").unwrap();
        assert_eq!(a.backend, Some(BackendChoice::Emulated));
        assert_eq!(
            (a.threads, a.reps, a.quick, a.json),
            (2, Some(3), true, true)
        );
        assert!(args("--reps").is_err());
        assert!(args("--threads x").is_err());
        assert!(args("--frobnicate").is_err());
    }

    #[test]
    fn json_has_the_fields() {
        let r = Report {
            dtype: "u8s8",
            m: 1,
            n: 2,
            k: 3,
            backend: Backend::Emulated,
            threads: 2,
            fused_s: 1.1e-6,
            plain_s: 1e-6,
            check: Err("a \"quoted\" reason".into()),
        };
        let line = serde_json::to_string(&r.record()).unwrap();
        let j: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(j["dtype"], "u8s8");
        assert_eq!(
            (j["m"].as_u64(), j["n"].as_u64(), j["k"].as_u64()),
            (Some(1), Some(2), Some(3))
        );
        assert_eq!(j["backend"], "emulated");
        assert_eq!(j["threads"], 2);
        let gops = j["gops"].as_f64().unwrap();
        assert!((gops - 12.0 / 1.1e-6 / 1e9).abs() < 1e-9, "{gops}");
        assert!((j["plain_gemm_gops"].as_f64().unwrap() - 0.012).abs() < 1e-12);
        assert!((j["epilogue_overhead"].as_f64().unwrap() - 0.1).abs() < 1e-9);
        assert_eq!(j["check"], "FAILED: a \"quoted\" reason");
        assert!(
            line.contains(r#""check":"FAILED: a \"quoted\" reason""#),
            "{line}"
        );
    }

    #[test]
    fn a_small_layer_checks_ok() {
        let gemm = Gemm::new().threads(1).backend(Backend::Emulated);
        for r in run_all(&gemm, 1, (64, 40)) {
            let r = r.unwrap();
            assert_eq!(r.check_text(), "ok", "{r:?}");
        }
    }
}
