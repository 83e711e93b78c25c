//! Many threads switching tile configurations on few cores: 64 threads, each switching 1000
//! times among four configurations through `configure_on` (so every switch is an LDTILECFG) and
//! checking a small int8 dot product (TILELOADD C, A and B, TDPBSSD, TILESTORED) after every
//! switch against a plain-Rust reference. Zero wrong results are allowed.
//!
//! On the emulator everywhere; on the silicon where AMX is usable (there the kernel saves and
//! restores each thread's tile state at every context switch, which the threads provoke by
//! yielding at random points of their kernels), else on the trap engine with
//! [`TRAPPED_SWITCHES`] switches per thread (every instruction is a signal there).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use amx_runtime::{configure_on, counters, Backend, TileConfig};
use amx_test_support::SplitMix64 as Rng;

const THREADS: usize = 64;
const SWITCHES: usize = 1000;
/// Switches per thread on the trap engine.
const TRAPPED_SWITCHES: usize = 100;

/// Switches per thread on `backend`.
fn switches(backend: Backend) -> usize {
    if backend == Backend::Hardware && amx_trap::is_active() {
        TRAPPED_SWITCHES
    } else {
        SWITCHES
    }
}

/// One configuration and the dot product it runs: C (`m` x `n` i32) += A (`m` x `4k` i8) x
/// B (`k` x `4n` i8, four bytes of one column per dword).
struct Kernel {
    config: TileConfig,
    c: u8,
    a: u8,
    b: u8,
    m: usize,
    n: usize,
    k: usize,
}

impl Kernel {
    /// C in tile `c` (m x 4n bytes), A in `a` (m x 4k), B in `b` (k x 4n), and one more tile
    /// (`filler`, `filler_rows` x 64) so that the configurations differ in more than shapes.
    fn new(
        (c, a, b): (u8, u8, u8),
        (m, n, k): (usize, usize, usize),
        (filler, filler_rows): (usize, u8),
    ) -> Kernel {
        let config = TileConfig::builder()
            .tile(c, m as u8, 4 * n as u16)
            .tile(a, m as u8, 4 * k as u16)
            .tile(b, k as u8, 4 * n as u16)
            .tile(filler as u8, filler_rows, 64)
            .build()
            .expect("the stress configurations are valid");
        Kernel {
            config,
            c,
            a,
            b,
            m,
            n,
            k,
        }
    }
}

/// Four configurations that differ from each other (so that switching always loads), with the
/// operands on different tile registers, from a full 16 x 16 x 64 block down to 2 x 2 x 4.
fn kernels() -> Vec<Kernel> {
    vec![
        Kernel::new((0, 1, 2), (16, 16, 16), (7, 1)),
        Kernel::new((3, 5, 6), (4, 4, 8), (0, 2)),
        Kernel::new((7, 4, 1), (2, 2, 1), (3, 3)),
        Kernel::new((2, 0, 5), (8, 16, 4), (6, 4)),
    ]
}

/// C + A x B in plain Rust (signed bytes, wrapping i32), the layouts of [`Kernel`].
fn reference(kernel: &Kernel, c: &[u8], a: &[u8], b: &[u8]) -> Vec<u8> {
    let (n, k) = (kernel.n, kernel.k);
    let mut out = c.to_vec();
    for m in 0..kernel.m {
        for j in 0..n {
            let at = 4 * (m * n + j);
            let mut acc = i32::from_le_bytes(out[at..at + 4].try_into().unwrap());
            for kk in 0..k {
                for i in 0..4 {
                    let x = i32::from(a[m * 4 * k + 4 * kk + i] as i8);
                    let y = i32::from(b[kk * 4 * n + 4 * j + i] as i8);
                    acc = acc.wrapping_add(x.wrapping_mul(y));
                }
            }
            out[at..at + 4].copy_from_slice(&acc.to_le_bytes());
        }
    }
    out
}

/// Yields the core now and then, so that threads are switched out in the middle of a kernel.
fn maybe_yield(rng: &mut Rng) {
    if rng.next_u64().is_multiple_of(4) {
        std::thread::yield_now();
    }
}

/// One thread's work: `switches(backend)` configure + dot product, each checked. Returns the number of
/// wrong results and a description of the first.
fn worker(backend: Backend, id: usize, start: &Barrier) -> (usize, Option<String>) {
    let kernels = kernels();
    let mut rng = Rng::new(0x5EED_0000 + id as u64);
    let mut wrong = 0;
    let mut first = None;
    let mut report = |what: String| {
        wrong += 1;
        first.get_or_insert(what);
    };
    start.wait();
    let before = counters();
    let switches = switches(backend);
    for i in 0..switches {
        // Consecutive switches always change the configuration: every one is an LDTILECFG.
        let kernel = &kernels[(i + id) % kernels.len()];
        let (m, n, k) = (kernel.m, kernel.n, kernel.k);
        let mut a = vec![0u8; m * 4 * k];
        let mut b = vec![0u8; k * 4 * n];
        let mut c = vec![0u8; m * 4 * n];
        rng.fill(&mut a);
        rng.fill(&mut b);
        rng.fill(&mut c);
        let expected = reference(kernel, &c, &a, &b);

        let mut tiles = match configure_on(backend, &kernel.config) {
            Ok(t) => t,
            Err(e) => {
                report(format!("thread {id} switch {i}: configure failed: {e}"));
                continue;
            }
        };
        maybe_yield(&mut rng);
        let mut out = vec![0xEEu8; c.len()];
        let result = (|| {
            tiles.tileloadd(kernel.c, &c, 4 * n)?;
            tiles.tileloadd(kernel.a, &a, 4 * k)?;
            maybe_yield(&mut rng);
            tiles.tileloadd(kernel.b, &b, 4 * n)?;
            tiles.tdpbssd(kernel.c, kernel.a, kernel.b)?;
            maybe_yield(&mut rng);
            tiles.tilestored(kernel.c, &mut out, 4 * n)
        })();
        drop(tiles);
        match result {
            Err(e) => report(format!("thread {id} switch {i}: {e}")),
            Ok(()) if out != expected => report(format!(
                "thread {id} switch {i}: C of {m}x{n} differs from the reference"
            )),
            Ok(()) => {}
        }
    }
    let after = counters();
    let loads = after.loads - before.loads;
    let skipped = after.skipped - before.skipped;
    if loads != switches as u64 || skipped != 0 {
        report(format!(
            "thread {id}: {loads} LDTILECFGs and {skipped} skipped loads for {switches} switches"
        ));
    }
    (wrong, first)
}

fn stress(backend: Backend) {
    let start = Instant::now();
    let barrier = Arc::new(Barrier::new(THREADS));
    let wrong = Arc::new(AtomicUsize::new(0));
    let first = Arc::new(Mutex::new(None::<String>));
    let handles: Vec<_> = (0..THREADS)
        .map(|id| {
            let (barrier, wrong, first) = (barrier.clone(), wrong.clone(), first.clone());
            std::thread::spawn(move || {
                let (n, what) = worker(backend, id, &barrier);
                wrong.fetch_add(n, Ordering::Relaxed);
                if let Some(what) = what {
                    first.lock().unwrap().get_or_insert(what);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a stress thread panicked");
    }
    let wrong = wrong.load(Ordering::Relaxed);
    println!(
        "{backend}: {THREADS} threads x {} switches in {:.2?}, {wrong} wrong",
        switches(backend),
        start.elapsed()
    );
    assert_eq!(
        wrong,
        0,
        "first wrong result: {}",
        first.lock().unwrap().clone().unwrap_or_default()
    );
}

#[test]
fn stress_emulated() {
    stress(Backend::Emulated);
}

#[test]
fn stress_hardware() {
    if amx_test_support::needs::silicon().is_none() {
        return;
    }
    stress(Backend::Hardware);
}
