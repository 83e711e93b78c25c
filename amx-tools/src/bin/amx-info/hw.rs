//! Measurements on the silicon, with the raw `amx_runtime::intrinsics` in the timed loops and
//! the checked [`Hardware`] unit for the setup.
//!
//! # The bench state
//!
//! Every timed loop relies on one state, which the safety comments below call *the bench
//! state*:
//!
//! - [`Bench::new`] succeeded: `Hardware::new()` returned a unit, so AMX-TILE is implemented, the
//!   OS enabled XTILECFG and XTILEDATA in XCR0 and this process holds the XTILEDATA permission;
//!   and the bench configuration `FULL` (palette 1, all eight tiles 16 rows x 64 bytes,
//!   start_row 0) passed this CPU's palette table, and the TMUL limits allow K = 16 rows and
//!   N = 64 bytes, so every TDP on three distinct tiles of `FULL` is legal
//!   (C.rows = A.rows = 16, C.colsb = B.colsb = 64, A.colsb / 4 = 16 = B.rows).
//! - [`Bench::prepare`] loaded `FULL` on this thread (through the checked unit) and no
//!   instruction has changed the configuration since: every tile is used, its colsb (64) is a
//!   multiple of 4 and start_row is 0, so TILEZERO, TILELOADD, TILELOADDT1 and TILESTORED are
//!   legal on every tile.
//! - The dot products of a kind run only when the CPU reports its feature (AMX-INT8, AMX-BF16),
//!   or, for TDPFP16PS, after a forked child executed it without SIGILL.
//! - The buffers are the bench's own 64-byte-aligned heap blocks: `src`, `b` 1 KiB each (16 rows
//!   of 64 bytes at stride 64), `dst` 8 KiB (eight such tiles), `cfg_out` 64 bytes; nothing else
//!   references them while a loop runs.
//!
//! After every raw block the checked unit re-reads the real configuration
//! ([`Hardware::resync`]), as the intrinsics' contract asks.

use std::hint::black_box;
use std::ptr;

use amx_runtime::intrinsics::*;
use std::time::Duration;

use amx_runtime::{Backend, Capabilities, Hardware, TileConfig, TileUnit};

use crate::clock::{add_block, add_chain, per_op, spin_ticks, tsc, ADDS_PER_BLOCK};

/// Dependent ADDs per TDPBSSD in the clock-under-AMX-load loop.
const ADDS_PER_TDP: u64 = 32;
use crate::emu::{bench_configs, bench_data, configure_costs, Event};
use amx_tools::Sample;

/// One instruction's cost, in TSC ticks.
pub struct Row {
    pub instruction: &'static str,
    pub method: &'static str,
    pub latency: Option<Sample>,
    pub throughput: Option<Sample>,
    pub reference: &'static str,
}

impl Row {
    /// How the reciprocal throughput (or, without one, the latency) compares with the
    /// reference figure, where there is one. `tsc_ghz` converts TSC ticks to ns.
    pub fn verdict(&self, tsc_ghz: f64) -> Option<crate::reference::Verdict> {
        let tsc = self.throughput.or(self.latency).map(|s| s.median);
        crate::reference::check(self.reference, tsc, tsc.map(|t| t / tsc_ghz))
    }
}

/// Whether TDPFP16PS executes here.
pub enum Fp16 {
    /// CPUID reports AMX-FP16.
    Cpuid,
    /// CPUID hides it, and a forked child executed it (exit status 0).
    ProbeExecuted,
    /// The forked child died of SIGILL: the core does not implement it.
    ProbeSigill,
    /// The probe could not tell (fork failed, or the child ended some other way).
    ProbeUnclear(String),
}

impl Fp16 {
    pub fn executes(&self) -> bool {
        matches!(self, Fp16::Cpuid | Fp16::ProbeExecuted)
    }

    pub fn text(&self) -> String {
        match self {
            Fp16::Cpuid => "TDPFP16PS: CPUID reports AMX-FP16".into(),
            Fp16::ProbeExecuted => "TDPFP16PS: CPUID hides AMX-FP16, but a forked child \
                                    executed it (exit 0): measured with assume_amx_fp16()"
                .into(),
            Fp16::ProbeSigill => {
                "TDPFP16PS: not implemented (the forked probe child died of SIGILL)".into()
            }
            Fp16::ProbeUnclear(why) => format!("TDPFP16PS: probe inconclusive ({why}): skipped"),
        }
    }
}

/// The TSC-to-core-clock ratios measured under AMX load.
pub struct AmxClock {
    /// TSC ticks per core cycle, the ADD chain interleaved with TDPBSSD (one per 32 ADDs).
    pub interleaved: Option<Sample>,
    /// TSC ticks per core cycle, the ADD chain right after a TDPBSSD burst.
    pub after_burst: Option<Sample>,
    /// How long the burst ran, in microseconds.
    pub burst_us: f64,
}

/// Everything measured on the silicon.
pub struct HwReport {
    pub rows: Vec<Row>,
    pub events: Vec<Event>,
    pub fp16: Fp16,
    pub clock: AmxClock,
    /// Measurements left out, and why.
    pub skipped: Vec<String>,
}

/// 1 KiB (one 16 x 64 tile), 64-byte aligned.
#[repr(C, align(64))]
struct Kib([u8; 1024]);

/// 8 KiB (eight tiles), 64-byte aligned.
#[repr(C, align(64))]
struct Kib8([u8; 8192]);

/// 64 bytes (a configuration image), 64-byte aligned.
#[repr(C, align(64))]
struct Cfg64([u8; 64]);

/// Repeats a block 2, 4 or 8 times (the loop bodies are unrolled so the loop counter's own
/// cost is spread over several instructions).
macro_rules! rep {
    (2, $b:block) => {{
        $b;
        $b;
    }};
    (4, $b:block) => {{
        rep!(2, $b);
        rep!(2, $b);
    }};
    (8, $b:block) => {{
        rep!(4, $b);
        rep!(4, $b);
    }};
}

/// The setup and buffers of the measurements.
struct Bench {
    hw: Hardware,
    full: TileConfig,
    alt: TileConfig,
    src: Box<Kib>,
    b: Box<Kib>,
    dst: Box<Kib8>,
    cfg_out: Box<Cfg64>,
    reps: usize,
    int8: bool,
    bf16: bool,
    tsc_ghz: f64,
}

impl Bench {
    fn new(caps: &Capabilities, quick: bool, tsc_ghz: f64) -> Result<Bench, String> {
        let hw = Hardware::new().map_err(|e| e.to_string())?;
        let (full, alt) = bench_configs()?;
        for cfg in [&full, &alt] {
            cfg.check_against(hw.palette_table()).map_err(|e| {
                format!("the bench configuration does not fit this CPU's palette: {e}")
            })?;
        }
        let tmul = hw.tmul_limits();
        if tmul.maxk < 16 || tmul.maxn < 64 {
            return Err(format!(
                "the TMUL limits (K <= {}, N <= {} bytes) are below the 16 x 64 bench tiles",
                tmul.maxk, tmul.maxn
            ));
        }
        // Normal numbers as bf16 and fp16, varied bytes as int8.
        let src = Box::new(Kib(bench_data(0)));
        let b = Box::new(Kib(bench_data(1)));
        Ok(Bench {
            hw,
            full,
            alt,
            src,
            b,
            dst: Box::new(Kib8([0; 8192])),
            cfg_out: Box::new(Cfg64([0; 64])),
            reps: if quick { 5 } else { 15 },
            int8: caps.amx_int8,
            bf16: caps.amx_bf16,
            tsc_ghz,
        })
    }

    /// Loads `FULL` through the checked unit, A data into t4 and t5, B data into t6 and t7, and
    /// zeroes t0..t3: the bench state.
    fn prepare(&mut self) -> Result<(), String> {
        let hw = &mut self.hw;
        let mut run = || -> Result<(), amx_runtime::Fault> {
            hw.ldtilecfg(self.full.as_bytes())?;
            hw.tileloadd(4, &self.src.0, 64)?;
            hw.tileloadd(5, &self.src.0, 64)?;
            hw.tileloadd(6, &self.b.0, 64)?;
            hw.tileloadd(7, &self.b.0, 64)?;
            for t in 0..4 {
                hw.tilezero(t)?;
            }
            Ok(())
        };
        run().map_err(|e| format!("setup failed: {e}"))
    }

    fn ns(&self, ticks: u64) -> f64 {
        ticks as f64 / self.tsc_ghz
    }
}

/// Stores t0..t3 to `scratch` and reads a byte of each back, so a timing that ends after it
/// covers every instruction on those tiles issued before.
///
/// # Safety
/// The bench state (module docs); `scratch` is 4 KiB writable and unaliased.
#[inline(always)]
unsafe fn drain(scratch: *mut u8) {
    // SAFETY: forwarded from this function's contract: t0..t3 are 16 x 64 tiles of FULL and
    // each store writes 16 rows of 64 bytes at stride 64 inside its 1 KiB of `scratch`.
    unsafe {
        _tile_stored::<0>(scratch, 64);
        _tile_stored::<1>(scratch.add(1024), 64);
        _tile_stored::<2>(scratch.add(2048), 64);
        _tile_stored::<3>(scratch.add(3072), 64);
        for i in 0..4 {
            black_box(ptr::read_volatile(scratch.add(i * 1024)));
        }
    }
}

/// Runs every hardware measurement. `Err` when the silicon cannot be used (the reason).
pub fn run(caps: &Capabilities, quick: bool, tsc_ghz: f64) -> Result<HwReport, String> {
    let mut bench = Bench::new(caps, quick, tsc_ghz)?;
    let mut skipped = Vec::new();
    let mut events = Vec::new();

    // Before any thread exists besides this one, and before this thread touches tile data.
    let fp16 = if caps.amx_fp16 {
        Fp16::Cpuid
    } else {
        probe_fp16(&bench.full)
    };
    if fp16.executes() && !caps.amx_fp16 {
        // SAFETY: the forked child just executed TDPFP16PS on this CPU and exited normally;
        // the cores of one machine are alike (AMX exists only on server parts, which have no
        // hybrid cores), so every core this thread may run on executes it.
        unsafe { bench.hw.assume_amx_fp16() };
    }

    first_use(&mut bench, &mut events, quick);
    let mut rows = Vec::new();
    config_rows(&mut bench, &mut rows, &mut skipped)?;
    data_rows(&mut bench, &mut rows)?;
    dot_rows(&mut bench, &mut rows, &mut skipped, &fp16)?;
    let clock = amx_clock(&mut bench, quick, &mut skipped)?;
    wake_up(&mut bench, &mut events, &mut skipped, quick)?;
    configure_events(&mut bench, &mut events, quick);

    bench.hw.resync();
    bench.hw.tilerelease();
    Ok(HwReport {
        rows,
        events,
        fp16,
        clock,
        skipped,
    })
}

/// Runs TDPFP16PS in a forked child: exit 0 means the core executes it, SIGILL that it does not.
fn probe_fp16(full: &TileConfig) -> Fp16 {
    let cfg = full.as_bytes().as_ptr();
    // SAFETY: fork() in this process, which has one thread at this point (the probe runs before
    // any other measurement spawns one); the child only issues system calls and AMX
    // instructions and leaves with _exit, so no lock or allocator state matters.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Fp16::ProbeUnclear(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: in the child. setrlimit reads the local `no_core` (no core file if the probe
        // dies). The child inherited the XTILEDATA permission; FULL (which `cfg` points to,
        // alive in the parent's copied memory) passed this CPU's palette checks, so LDTILECFG is
        // legal, and t0, t4, t6 are distinct 16 x 64 tiles TDPFP16PS accepts. Whether the core
        // implements TDPFP16PS is the question: if it does not, the #UD raises SIGILL, whose
        // default action ends this child and nothing else, which is the answer the parent reads.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            _tile_loadconfig(cfg);
            _tile_dpfp16ps::<0, 4, 6>();
            _tile_release();
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: `pid` is this process's child and `status` a live c_int.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    if waited != pid {
        return Fp16::ProbeUnclear(format!("waitpid: {}", std::io::Error::last_os_error()));
    }
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
        Fp16::ProbeExecuted
    } else if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGILL {
        Fp16::ProbeSigill
    } else {
        Fp16::ProbeUnclear(format!("child status {status:#x}"))
    }
}

/// The first tile-data instruction on the calling thread, and the same instruction again:
/// `(first, second)` in TSC ticks.
fn first_tile_data_here(full: &TileConfig) -> Result<(u64, u64), String> {
    let mut hw = Hardware::new().map_err(|e| e.to_string())?;
    // LDTILECFG touches only the configuration: it never traps (docs/semantics.md L7).
    hw.ldtilecfg(full.as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: FULL was just loaded on this thread by the checked unit, on a CPU where
    // `Hardware::new()` succeeded (permission granted): TILEZERO of the used 16 x 64 tiles t0
    // and t1 is legal. The first one traps once into the kernel, which allocates this thread's
    // larger XSAVE area and restarts it.
    let (t0, t1, t2) = unsafe {
        let t0 = tsc();
        _tile_zero::<0>();
        let t1 = tsc();
        _tile_zero::<1>();
        let t2 = tsc();
        (t0, t1, t2)
    };
    hw.resync();
    hw.tilerelease();
    Ok((t1.wrapping_sub(t0), t2.wrapping_sub(t1)))
}

fn first_use(bench: &mut Bench, events: &mut Vec<Event>, quick: bool) {
    // This thread (the process's main thread) has not executed a tile-data instruction yet.
    match first_tile_data_here(&bench.full) {
        Ok((first, again)) => events.push(Event {
            name: "first tile-data instruction of the process".into(),
            method: format!(
                "TILEZERO on the main thread after LDTILECFG, one sample (the next TILEZERO: \
                 {:.0} ns)",
                bench.ns(again)
            ),
            ns: Sample::of(&[bench.ns(first)]),
            reference: "~20 us",
        }),
        Err(e) => events.push(Event {
            name: "first tile-data instruction of the process".into(),
            method: format!("failed: {e}"),
            ns: None,
            reference: "~20 us",
        }),
    }
    let threads = if quick { 3 } else { 9 };
    let mut extra = Vec::new();
    for _ in 0..threads {
        let full = bench.full;
        let first = std::thread::spawn(move || first_tile_data_here(&full)).join();
        if let Ok(Ok((first, again))) = first {
            extra.push(bench.ns(first.saturating_sub(again)));
        }
    }
    events.push(Event {
        name: "first tile-data instruction of a thread".into(),
        method: format!(
            "TILEZERO in a fresh thread minus the next TILEZERO, median of {threads} threads"
        ),
        ns: Sample::of(&extra),
        reference: "~20 us",
    });
}

/// LDTILECFG, STTILECFG, TILERELEASE.
fn config_rows(
    bench: &mut Bench,
    rows: &mut Vec<Row>,
    skipped: &mut Vec<String>,
) -> Result<(), String> {
    let reps = bench.reps;
    let full = bench.full.as_bytes().as_ptr();
    let alt = bench.alt.as_bytes().as_ptr();
    let cfg_out = bench.cfg_out.0.as_mut_ptr();

    bench.prepare()?;
    let same = per_op(reps, 40, 8, |n| {
        for _ in 0..n {
            // SAFETY: the bench state; LDTILECFG of FULL, an image this CPU accepts, keeps it.
            unsafe { rep!(8, { _tile_loadconfig(full) }) };
        }
    });
    bench.hw.resync();
    rows.push(Row {
        instruction: "LDTILECFG",
        method: "same config back to back",
        latency: None,
        throughput: same,
        reference: "117-142 TSC (45-55 ns)",
    });

    let alternating = per_op(reps, 40, 8, |n| {
        for _ in 0..n {
            // SAFETY: FULL and ALT both passed this CPU's palette checks (Bench::new), so both
            // loads are legal; the block ends with FULL loaded again.
            unsafe {
                rep!(4, {
                    _tile_loadconfig(alt);
                    _tile_loadconfig(full);
                })
            };
        }
    });
    bench.hw.resync();
    rows.push(Row {
        instruction: "LDTILECFG",
        method: "alternating two configs",
        latency: None,
        throughput: alternating,
        reference: "-",
    });

    if bench.int8 {
        bench.prepare()?;
        let in_flight = per_op(reps, 40, 4, |n| {
            for _ in 0..n {
                // SAFETY: the bench state, and AMX-INT8 is reported; LDTILECFG of FULL keeps the
                // bench state (it zeroes the tiles, which the next TDPBSSD accepts).
                unsafe {
                    rep!(4, {
                        _tile_dpbssd::<0, 4, 6>();
                        _tile_loadconfig(full);
                    })
                };
            }
        });
        bench.hw.resync();
        rows.push(Row {
            instruction: "LDTILECFG",
            method: "after a TDPBSSD (cost per pair)",
            latency: None,
            throughput: in_flight,
            reference: "~190 TSC (with tile work in flight)",
        });
    } else {
        skipped.push("LDTILECFG with tile work in flight: the CPU lacks AMX-INT8".into());
    }

    bench.prepare()?;
    let store_cfg = per_op(reps, 400, 8, |n| {
        for _ in 0..n {
            // SAFETY: the bench state; `cfg_out` is the bench's own 64 writable bytes.
            unsafe { rep!(8, { _tile_storeconfig(cfg_out) }) };
        }
    });
    bench.hw.resync();
    rows.push(Row {
        instruction: "STTILECFG",
        method: "back to back, same 64 bytes",
        latency: None,
        throughput: store_cfg,
        reference: "12-14 TSC",
    });

    let release = per_op(reps, 400, 8, |n| {
        for _ in 0..n {
            // SAFETY: TILERELEASE is legal configured or not (docs/semantics.md R2); nothing else runs
            // in this loop.
            unsafe { rep!(8, { _tile_release() }) };
        }
    });
    bench.hw.resync();
    rows.push(Row {
        instruction: "TILERELEASE",
        method: "back to back",
        latency: None,
        throughput: release,
        reference: "8.5-9.5 TSC",
    });
    Ok(())
}

/// TILEZERO, TILELOADD, TILELOADDT1, TILESTORED.
fn data_rows(bench: &mut Bench, rows: &mut Vec<Row>) -> Result<(), String> {
    let reps = bench.reps;
    let src = bench.src.0.as_ptr();
    let dst = bench.dst.0.as_mut_ptr();

    bench.prepare()?;
    let zero_tput = per_op(reps, 400, 8, |n| {
        // SAFETY: the bench state: TILEZERO of each used tile t0..t7 is legal; `dst` is 8 KiB.
        unsafe {
            for _ in 0..n {
                _tile_zero::<0>();
                _tile_zero::<1>();
                _tile_zero::<2>();
                _tile_zero::<3>();
                _tile_zero::<4>();
                _tile_zero::<5>();
                _tile_zero::<6>();
                _tile_zero::<7>();
            }
            drain(dst);
        }
    });
    let zero_same = per_op(reps, 400, 8, |n| {
        // SAFETY: as above.
        unsafe {
            for _ in 0..n {
                rep!(8, { _tile_zero::<0>() });
            }
            drain(dst);
        }
    });
    bench.hw.resync();
    rows.push(Row {
        instruction: "TILEZERO",
        method: "lat: same tile b2b; tput: t0..t7",
        latency: zero_same,
        throughput: zero_tput,
        reference: "-",
    });

    macro_rules! load_row {
        ($intr:ident, $name:literal, $reference:literal) => {{
            bench.prepare()?;
            let tput = per_op(reps, 400, 8, |n| {
                // SAFETY: the bench state: each 16 x 64 tile is loaded from the 1 KiB `src`
                // (16 rows of 64 bytes at stride 64); `dst` is 8 KiB for the drain.
                unsafe {
                    for _ in 0..n {
                        $intr::<0>(src, 64);
                        $intr::<1>(src, 64);
                        $intr::<2>(src, 64);
                        $intr::<3>(src, 64);
                        $intr::<4>(src, 64);
                        $intr::<5>(src, 64);
                        $intr::<6>(src, 64);
                        $intr::<7>(src, 64);
                    }
                    drain(dst);
                }
            });
            bench.hw.resync();
            rows.push(Row {
                instruction: $name,
                method: "1 KiB from L1, t0..t7",
                latency: None,
                throughput: tput,
                reference: $reference,
            });
        }};
    }
    load_row!(_tile_loadd, "TILELOADD", "~6.5 TSC");
    load_row!(_tile_stream_loadd, "TILELOADDT1", "-");

    bench.prepare()?;
    let store = per_op(reps, 400, 8, |n| {
        // SAFETY: the bench state: tile t is stored to its own 1 KiB of the 8 KiB `dst`
        // (16 rows of 64 bytes at stride 64).
        unsafe {
            for _ in 0..n {
                _tile_stored::<0>(dst, 64);
                _tile_stored::<1>(dst.add(1024), 64);
                _tile_stored::<2>(dst.add(2048), 64);
                _tile_stored::<3>(dst.add(3072), 64);
                _tile_stored::<4>(dst.add(4096), 64);
                _tile_stored::<5>(dst.add(5120), 64);
                _tile_stored::<6>(dst.add(6144), 64);
                _tile_stored::<7>(dst.add(7168), 64);
            }
            black_box(ptr::read_volatile(dst.add(7168)));
        }
    });
    // Latency: a load that reads what the previous store wrote, alternating between two 1 KiB
    // halves of `dst`: one TILELOADD + TILESTORED round trip through L1 per pair.
    let round_trip = per_op(reps, 100, 8, |n| {
        // SAFETY: the bench state: t0 is loaded from and stored to 1 KiB blocks of `dst` (16
        // rows of 64 bytes at stride 64).
        unsafe {
            for _ in 0..n {
                rep!(4, {
                    _tile_loadd::<0>(dst, 64);
                    _tile_stored::<0>(dst.add(1024), 64);
                    _tile_loadd::<0>(dst.add(1024), 64);
                    _tile_stored::<0>(dst, 64);
                });
            }
            black_box(ptr::read_volatile(dst));
        }
    });
    rows.push(Row {
        instruction: "TILESTORED",
        method: "tput: 1 KiB to L1, t0..t7",
        latency: None,
        throughput: store,
        reference: "~12-13 TSC",
    });
    rows.push(Row {
        instruction: "TILELOADD+TILESTORED",
        method: "lat: load of the bytes just stored",
        latency: round_trip,
        throughput: None,
        reference: "-",
    });
    bench.hw.resync();
    Ok(())
}

/// The dot products: latency (one C accumulating) and throughput (four C round robin).
fn dot_rows(
    bench: &mut Bench,
    rows: &mut Vec<Row>,
    skipped: &mut Vec<String>,
    fp16: &Fp16,
) -> Result<(), String> {
    let reps = bench.reps;
    let dst = bench.dst.0.as_mut_ptr();
    macro_rules! dot_row {
        ($intr:ident, $name:literal, $reference:literal) => {{
            bench.prepare()?;
            let latency = per_op(reps, 100, 8, |n| {
                // SAFETY: the bench state, and the caller checked that the CPU executes this
                // dot product: t0 (C), t4 (A), t6 (B) are distinct 16 x 64 tiles it accepts.
                unsafe {
                    for _ in 0..n {
                        rep!(8, { $intr::<0, 4, 6>() });
                    }
                    drain(dst);
                }
            });
            let throughput = per_op(reps, 200, 8, |n| {
                // SAFETY: as above, with C = t0..t3.
                unsafe {
                    for _ in 0..n {
                        rep!(2, {
                            $intr::<0, 4, 6>();
                            $intr::<1, 5, 7>();
                            $intr::<2, 4, 6>();
                            $intr::<3, 5, 7>();
                        });
                    }
                    drain(dst);
                }
            });
            bench.hw.resync();
            rows.push(Row {
                instruction: $name,
                method: "16x16 += 16x64 . 16x64; lat: 1 C, tput: 4 C",
                latency,
                throughput,
                reference: $reference,
            });
        }};
    }
    if bench.int8 {
        dot_row!(_tile_dpbssd, "TDPBSSD", "11.4-13.6 TSC (16 core cycles)");
        dot_row!(_tile_dpbsud, "TDPBSUD", "-");
        dot_row!(_tile_dpbusd, "TDPBUSD", "-");
        dot_row!(_tile_dpbuud, "TDPBUUD", "-");
    } else {
        skipped.push("TDPBSSD/SUD/USD/UUD: the CPU lacks AMX-INT8".into());
    }
    if bench.bf16 {
        dot_row!(
            _tile_dpbf16ps,
            "TDPBF16PS",
            "11.4-13.6 TSC (16 core cycles)"
        );
    } else {
        skipped.push("TDPBF16PS: the CPU lacks AMX-BF16".into());
    }
    if fp16.executes() {
        // One checked call first: the safe unit runs its shape checks and executes it once.
        bench.prepare()?;
        bench
            .hw
            .tdpfp16ps(0, 4, 6)
            .map_err(|e| format!("TDPFP16PS through the checked unit: {e}"))?;
        dot_row!(_tile_dpfp16ps, "TDPFP16PS", "-");
    } else {
        skipped.push(fp16.text());
    }
    bench.hw.resync();
    Ok(())
}

/// The core clock under AMX load, as TSC ticks per core cycle.
fn amx_clock(
    bench: &mut Bench,
    quick: bool,
    skipped: &mut Vec<String>,
) -> Result<AmxClock, String> {
    let burst_us = if quick { 500.0 } else { 2000.0 };
    if !bench.int8 {
        skipped.push("the core clock under AMX load: the CPU lacks AMX-INT8".into());
        return Ok(AmxClock {
            interleaved: None,
            after_burst: None,
            burst_us,
        });
    }
    let reps = bench.reps;
    let dst = bench.dst.0.as_mut_ptr();
    bench.prepare()?;
    // One TDPBSSD per 32 dependent ADDs: the ADD chain (32 core cycles) is the bottleneck, and
    // the TMUL unit (16 cycles per TDPBSSD) is busy half of the time.
    let interleaved = per_op(reps, 100, 4 * ADDS_PER_TDP, |n| {
        let (mut x, y) = (0u64, black_box(1u64));
        for _ in 0..n {
            // SAFETY: the bench state and AMX-INT8: t0..t3 (C), t4 (A), t6 (B) are distinct
            // 16 x 64 tiles TDPBSSD accepts.
            unsafe { _tile_dpbssd::<0, 4, 6>() };
            add_block!(x, y, 32);
            // SAFETY: as above.
            unsafe { _tile_dpbssd::<1, 4, 6>() };
            add_block!(x, y, 32);
            // SAFETY: as above.
            unsafe { _tile_dpbssd::<2, 4, 6>() };
            add_block!(x, y, 32);
            // SAFETY: as above.
            unsafe { _tile_dpbssd::<3, 4, 6>() };
            add_block!(x, y, 32);
        }
        // SAFETY: the bench state; `dst` is 8 KiB.
        unsafe { drain(dst) };
        black_box(x);
    });
    // A burst of TDPBSSDs, then at once 20,000 dependent ADDs.
    let burst_ticks = (burst_us * 1e3 * bench.tsc_ghz) as u64;
    let mut after = Vec::new();
    for _ in 0..reps {
        let end = tsc().wrapping_add(burst_ticks);
        while tsc() < end {
            // SAFETY: as above.
            unsafe {
                rep!(8, {
                    _tile_dpbssd::<0, 4, 6>();
                    _tile_dpbssd::<1, 4, 6>();
                    _tile_dpbssd::<2, 4, 6>();
                    _tile_dpbssd::<3, 4, 6>();
                });
            }
        }
        let t0 = tsc();
        black_box(add_chain(200));
        let t1 = tsc();
        after.push(t1.wrapping_sub(t0) as f64 / (200 * ADDS_PER_BLOCK) as f64);
    }
    bench.hw.resync();
    Ok(AmxClock {
        interleaved,
        after_burst: Sample::of(&after),
        burst_us,
    })
}

/// The cost of the next TDPBSSD after the AMX unit idled, against one issued right after another.
fn wake_up(
    bench: &mut Bench,
    events: &mut Vec<Event>,
    skipped: &mut Vec<String>,
    quick: bool,
) -> Result<(), String> {
    if !bench.int8 {
        skipped.push("the wake-up cost: the CPU lacks AMX-INT8".into());
        return Ok(());
    }
    let dst = bench.dst.0.as_mut_ptr();
    let samples = if quick { 7 } else { 25 };
    bench.prepare()?;
    // One TDPBSSD, then its C stored and read back: the timing covers the whole instruction.
    let once = || -> u64 {
        // SAFETY: the bench state and AMX-INT8: t0, t4, t6 fit TDPBSSD; t0 is stored to the
        // first 1 KiB of `dst`.
        unsafe {
            let t0 = tsc();
            _tile_dpbssd::<0, 4, 6>();
            _tile_stored::<0>(dst, 64);
            black_box(ptr::read_volatile(dst));
            tsc().wrapping_sub(t0)
        }
    };
    let mut warm = Vec::new();
    for _ in 0..samples {
        once();
        warm.push(bench.ns(once()));
    }
    let warm = Sample::of(&warm);
    events.push(Event {
        name: "TDPBSSD + TILESTORED, AMX busy".into(),
        method: format!("right after another, median of {samples}"),
        ns: warm,
        reference: "-",
    });
    for gap_us in [1u64, 5, 20, 100] {
        let gap = (gap_us as f64 * 1e3 * bench.tsc_ghz) as u64;
        let mut extra = Vec::new();
        for _ in 0..samples {
            spin_ticks(gap);
            let cold = bench.ns(once());
            extra.push(cold - warm.map_or(0.0, |w| w.median));
        }
        events.push(Event {
            name: format!("wake-up after {gap_us} us of AMX idle"),
            method: format!(
                "the same pair after a scalar spin, minus the busy figure, median of {samples}"
            ),
            ns: Sample::of(&extra),
            reference: if gap_us >= 5 {
                "~2.8 us (after >= 5 us idle)"
            } else {
                "-"
            },
        });
    }
    bench.hw.resync();
    Ok(())
}

/// `configure()` on an already-loaded configuration and on one that needs LDTILECFG.
fn configure_events(bench: &mut Bench, events: &mut Vec<Event>, quick: bool) {
    bench.hw.resync();
    let target = Duration::from_millis(if quick { 2 } else { 10 });
    events.extend(configure_costs(
        Backend::Hardware,
        &bench.full,
        &bench.alt,
        target,
        bench.reps,
    ));
}
