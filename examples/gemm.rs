//! An int8 GEMM as an application writes it: `cargo run --release --example gemm`.
//!
//! B (the weights) is packed once into the tile layout and reused; each call multiplies a
//! batch of activations by it. The product runs on the AMX unit where the CPU has one and on
//! the bit-exact emulator elsewhere (`AMX_BACKEND` chooses). A few outputs are checked against
//! a plain loop, and the time of one call is printed. For the throughput against the
//! machine's measured peak and bandwidth, run
//! `cargo run --release -p amx-tools --bin amx-bench`.

use std::process::ExitCode;
use std::time::Instant;

use amx_gemm::{Gemm, Int8, PackedB};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error's own sentence (Display), not its Debug form.
            eprintln!("gemm example: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (m, n, k) = (256, 512, 1024);
    // A is m x k, B is k x n, both row-major; C = A x B is m x n in i32.
    let a: Vec<i8> = (0..m * k).map(|i| (i * 7 % 255) as i8).collect();
    let b: Vec<i8> = (0..k * n).map(|i| (i * 13 % 251) as i8).collect();

    let start = Instant::now();
    let packed = PackedB::<Int8>::pack(&b, k, n, n)?;
    let pack_time = start.elapsed();

    let gemm = Gemm::new(); // one worker per core, the process's backend
    let mut c = vec![0i32; m * n];
    gemm.run(m, &a, k, &packed, &mut c, n)?; // the first call also starts the workers
    let start = Instant::now();
    let stats = gemm.run(m, &a, k, &packed, &mut c, n)?;
    let time = start.elapsed();

    for (i, j) in [(0, 0), (m / 2, n / 3), (m - 1, n - 1)] {
        let expect: i32 = (0..k)
            .map(|p| i32::from(a[i * k + p]) * i32::from(b[p * n + j]))
            .sum();
        if c[i * n + j] != expect {
            let got = c[i * n + j];
            return Err(format!("C[{i}][{j}] is {got}, the plain loop gives {expect}").into());
        }
    }

    let gops = 2.0 * (m * n * k) as f64 / time.as_secs_f64() / 1e9;
    println!(
        "{m}x{n}x{k} int8 GEMM on the {} backend, {} thread(s): {:.3} ms ({gops:.1} GOP/s); \
         B packed once in {:.3} ms; C checked at 3 outputs",
        stats.backend,
        stats.threads,
        time.as_secs_f64() * 1e3,
        pack_time.as_secs_f64() * 1e3,
    );
    Ok(())
}
