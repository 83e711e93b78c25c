//! Cached against streaming stores for C: `cargo run --release --example c_stores`.
//!
//! Runs one product (or fused layer) twice per round, once with `CStores::Cached` and once
//! with `--stores` (`auto` by default), the order swapped every round so that neither side
//! always runs first, and prints the median and quartiles of the per-round speed-up (cached
//! time over the other's). The two outputs are compared bit for bit every round. C (or the
//! output) is placed on a 64-byte boundary, as streaming needs (see `amx_gemm::CStores`).
//!
//! ```text
//! --m M --n N --k K     the shape (default 2048 x 2048 x 2048)
//! --what u8s8|bf16|layer  a u8s8 or bf16 product, or a u8s8 layer with per-channel scales,
//!                       bias, GELU (tanh) and bf16 output (default u8s8)
//! --stores auto|streaming  the side against cached stores (default auto)
//! --read-back           read one element of every 64-byte line of C after each call, inside
//!                       the timed region (a caller that uses C at once)
//! --threads T           worker threads (default 1)
//! --rounds R            rounds (default 15)
//! --backend hardware|emulated|trapped|auto   (default: AMX_BACKEND, else auto)
//! ```

use std::process::ExitCode;
use std::time::Instant;

use amx_examples::{values, Flags};
use amx_gemm::{
    bf16, Activation, Backend, Bf16, CStores, Epilogue, Gemm, MatMut, MatRef, PackedB, Scalar,
    WeightScale, U8S8,
};
use amx_runtime::BackendChoice;

#[derive(Debug, PartialEq)]
struct Args {
    shape: (usize, usize, usize),
    what: What,
    stores: CStores,
    read_back: bool,
    threads: usize,
    rounds: usize,
    backend: Option<BackendChoice>,
    help: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum What {
    U8s8,
    Bf16,
    Layer,
}

const USAGE: &str = "usage: c_stores [--m M] [--n N] [--k K] [--what u8s8|bf16|layer] \
                     [--stores auto|streaming] [--read-back] [--threads T] [--rounds R] \
                     [--backend hardware|emulated|trapped|auto]";

fn parse(words: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        shape: (2048, 2048, 2048),
        what: What::U8s8,
        stores: CStores::Auto,
        read_back: false,
        threads: 1,
        rounds: 15,
        backend: None,
        help: false,
    };
    let mut flags = Flags::new(words);
    while let Some((name, inline)) = flags.next_flag() {
        let mut value = |what: &str| flags.value(&name, &inline, what);
        let number = |text: String| {
            text.parse::<usize>()
                .ok()
                .filter(|&x| x > 0)
                .ok_or_else(|| format!("{name}: {text:?} is not a positive integer"))
        };
        match name.as_str() {
            "--m" => args.shape.0 = number(value("a number")?)?,
            "--n" => args.shape.1 = number(value("a number")?)?,
            "--k" => args.shape.2 = number(value("a number")?)?,
            "--what" => {
                args.what = match value("u8s8, bf16 or layer")?.as_str() {
                    "u8s8" => What::U8s8,
                    "bf16" => What::Bf16,
                    "layer" => What::Layer,
                    other => return Err(format!("--what: {other:?} is not u8s8, bf16 or layer")),
                }
            }
            "--stores" => {
                args.stores = match value("auto or streaming")?.as_str() {
                    "auto" => CStores::Auto,
                    "streaming" => CStores::Streaming,
                    other => return Err(format!("--stores: {other:?} is not auto or streaming")),
                }
            }
            "--read-back" => args.read_back = true,
            "--threads" => args.threads = number(value("a number")?)?,
            "--rounds" => args.rounds = number(value("a number")?)?,
            "--backend" => {
                args.backend =
                    Some(BackendChoice::parse(&value("a backend")?).map_err(|e| e.to_string())?)
            }
            "-h" | "--help" => args.help = true,
            _ => return Err(format!("unknown option {name:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let result = parse(std::env::args().skip(1)).and_then(|args| {
        if args.help {
            println!("{USAGE}");
            Ok(())
        } else {
            run(&args)
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("c_stores example: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `len` values of `T` starting on a 64-byte boundary inside an owned buffer.
struct Aligned<T> {
    buf: Vec<T>,
    at: usize,
    len: usize,
}

impl<T: Scalar> Aligned<T> {
    fn zeroed(len: usize) -> Aligned<T> {
        let buf = vec![T::default(); len + 64];
        let at = buf.as_ptr().align_offset(64);
        Aligned { buf, at, len }
    }

    fn slice(&mut self) -> &mut [T] {
        &mut self.buf[self.at..self.at + self.len]
    }

    /// One element of every 64-byte line, summed so that the reads happen.
    fn read_back(&mut self) -> f64 {
        let step = (64 / std::mem::size_of::<T>()).max(1);
        self.slice().iter().step_by(step).map(|x| x.to_f64()).sum()
    }
}

/// One timed call with `stores`: its time in seconds and the output's bytes.
type Call<'a> = Box<dyn FnMut(CStores) -> Result<(f64, Vec<u8>), String> + 'a>;

fn run(args: &Args) -> Result<(), String> {
    let (m, n, k) = args.shape;
    let mut gemm = Gemm::new().threads(args.threads);
    if let Some(choice) = args.backend {
        gemm = gemm.backend(choice.resolve().map_err(|e| e.to_string())?);
    }
    let backend: Backend = gemm.resolved_backend().map_err(|e| e.to_string())?;
    let read_back = args.read_back;
    let mut call: Call = match args.what {
        What::U8s8 | What::Layer => {
            let a: Vec<u8> = values(m * k, 1, (0.0, 255.0));
            let b: Vec<i8> = values(k * n, 2, (-127.0, 127.0));
            let packed = PackedB::<U8S8>::pack(&b, k, n, n).map_err(|e| e.to_string())?;
            let scales: Vec<f32> = values(n, 3, (0.001, 0.003));
            let bias: Vec<f32> = values(n, 4, (-0.5, 0.5));
            let mut c = Aligned::<i32>::zeroed(m * n);
            let mut out = Aligned::<bf16>::zeroed(m * n);
            let layer = args.what == What::Layer;
            Box::new(move |stores| {
                let g = gemm.clone().c_stores(stores);
                let start = Instant::now();
                let bytes = if layer {
                    let e = Epilogue::new()
                        .quantized(0.02, 128, WeightScale::Channel(&scales))
                        .bias(&bias)
                        .activation(Activation::GeluTanh);
                    g.run_with(
                        MatRef::new(&a, m, k),
                        &packed,
                        MatMut::new(out.slice(), m, n),
                        &e,
                    )
                    .map_err(|e| e.to_string())?;
                    if read_back {
                        std::hint::black_box(out.read_back());
                    }
                    let t = start.elapsed().as_secs_f64();
                    (
                        t,
                        out.slice()
                            .iter()
                            .flat_map(|x| x.to_bits().to_le_bytes())
                            .collect(),
                    )
                } else {
                    g.run(m, &a, k, &packed, c.slice(), n)
                        .map_err(|e| e.to_string())?;
                    if read_back {
                        std::hint::black_box(c.read_back());
                    }
                    let t = start.elapsed().as_secs_f64();
                    (t, c.slice().iter().flat_map(|x| x.to_le_bytes()).collect())
                };
                Ok(bytes)
            })
        }
        What::Bf16 => {
            let a: Vec<bf16> = values(m * k, 1, (-2.0, 2.0));
            let b: Vec<bf16> = values(k * n, 2, (-2.0, 2.0));
            let packed = PackedB::<Bf16>::pack(&b, k, n, n).map_err(|e| e.to_string())?;
            let mut c = Aligned::<f32>::zeroed(m * n);
            Box::new(move |stores| {
                let g = gemm.clone().c_stores(stores);
                let start = Instant::now();
                g.run(m, &a, k, &packed, c.slice(), n)
                    .map_err(|e| e.to_string())?;
                if read_back {
                    std::hint::black_box(c.read_back());
                }
                let t = start.elapsed().as_secs_f64();
                Ok((t, c.slice().iter().flat_map(|x| x.to_le_bytes()).collect()))
            })
        }
    };
    // Warm-up: page in every buffer and let the pools start.
    call(CStores::Cached)?;
    call(args.stores)?;
    let mut ratios = Vec::with_capacity(args.rounds);
    for round in 0..args.rounds {
        let (first, second) = if round % 2 == 0 {
            (CStores::Cached, args.stores)
        } else {
            (args.stores, CStores::Cached)
        };
        let (t1, out1) = call(first)?;
        let (t2, out2) = call(second)?;
        if out1 != out2 {
            return Err(format!("round {round}: the outputs differ"));
        }
        let (cached, other) = if first == CStores::Cached {
            (t1, t2)
        } else {
            (t2, t1)
        };
        ratios.push(cached / other);
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: usize| ratios[(ratios.len() - 1) * q / 4];
    println!(
        "{:?} {m} x {n} x {k}, {} thread(s) on {backend}{}: {:?} against cached stores, \
         speed-up median {:.3} (quartiles {:.3} - {:.3}) over {} rounds; outputs identical",
        args.what,
        args.threads,
        if read_back { ", C read back" } else { "" },
        args.stores,
        at(2),
        at(1),
        at(3),
        args.rounds,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> impl Iterator<Item = String> + '_ {
        s.split_whitespace().map(str::to_owned)
    }

    #[test]
    fn options_parse_and_bad_ones_are_refused() {
        let a = parse(words(
            "--m 64 --n=96 --k 128 --what layer --stores streaming --read-back",
        ))
        .unwrap();
        assert_eq!(a.shape, (64, 96, 128));
        assert_eq!(a.what, What::Layer);
        assert_eq!(a.stores, CStores::Streaming);
        assert!(a.read_back);
        for bad in [
            "--m 0",
            "--what f64",
            "--stores cached",
            "--rounds",
            "--frobnicate",
        ] {
            assert!(parse(words(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_small_run_on_the_emulator_completes() {
        for what in ["u8s8", "bf16", "layer"] {
            let args = parse(words(&format!(
                "--m 40 --n 64 --k 70 --what {what} --rounds 2 --read-back --backend emulated"
            )))
            .unwrap();
            run(&args).unwrap();
        }
    }
}
