//! `amx-info`: can this process use Intel AMX here, and what does each instruction cost?
//!
//! ```text
//! cargo run --release -p amx-tools --bin amx-info             # human report
//! cargo run --release -p amx-tools --bin amx-info -- --json   # one JSON object on stdout
//! cargo run --release -p amx-tools --bin amx-info -- --quick  # fewer repetitions (CI speed)
//! cargo install --path amx-tools; amx-info                    # installed
//! ```
//!
//! It prints, in this order:
//!
//! 1. **The verdict**: AMX is usable in this process, or the one reason it is not
//!    (`Capabilities::unavailable()`, else the error of `Hardware::new()`), which says what to do.
//! 2. **Capabilities**: the CPU's AMX features (AMX-TILE, -INT8, -BF16, -FP16, -COMPLEX),
//!    OSXSAVE and XCR0 bits 17/18, the palette table (CPUID leaf 0x1D), the TMUL limits
//!    (leaf 0x1E), the permission before and after `request_permission()`, the backend `auto`
//!    chooses and the `AMX_BACKEND` override in effect, and the raw CPUID leaves.
//! 3. **Clocks**: the TSC frequency (RDTSC against `Instant`), and the core clock estimated from a
//!    chain of dependent one-cycle ADDs, alone and under AMX load.
//! 4. **The silicon's cost per instruction**, when AMX is usable: latency (a dependent chain,
//!    e.g. dot products accumulating into one C tile) and reciprocal throughput (independent
//!    instructions, e.g. four C tiles round robin), in TSC cycles, core cycles at the AMX clock
//!    and nanoseconds, beside reference figures measured on Sapphire Rapids-class silicon;
//!    then one-off costs: the first tile-data instruction of the process and of a
//!    new thread, the wake-up after the AMX unit idled, `configure()` with and without LDTILECFG.
//!    TDPFP16PS is measured when CPUID reports AMX-FP16, or when a forked child executed it
//!    without SIGILL (a hypervisor may hide the bit of a core that has it).
//! 5. **The permission system calls** (every machine).
//! 6. **The emulator's speed** per instruction, and GOP/s for the dot products.
//!
//! Every figure is a median of several runs, except the once-per-process costs (the first
//! permission request, the main thread's first tile-data instruction), which are one sample and
//! say so. Per-instruction figures are slopes (the time of `3n` iterations minus that of `n`),
//! so fixed costs such as the fences cancel. Every AMX path is guarded by detection: on a
//! machine without AMX the tool says why and measures the rest.

use std::process::ExitCode;
use std::time::Duration;

use amx_runtime::permit;
use amx_tools::timing::per_call_ns;
use amx_tools::Sample;
use serde::Serialize;

mod caps;
#[cfg(target_arch = "x86_64")]
mod clock;
mod emu;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod hw;
mod reference;
mod report;
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod trap;

use caps::CapsInfo;
use emu::Event;
use report::{num, Table};

const USAGE: &str = "usage: amx-info [--json] [--quick]
  --json    print one JSON object on stdout instead of the tables
  --quick   fewer and shorter repetitions (CI speed; noisier figures)";

/// The command line.
struct Options {
    json: bool,
    quick: bool,
}

fn parse_args() -> Result<Options, String> {
    let mut opts = Options {
        json: false,
        quick: false,
    };
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--json" => opts.json = true,
            "--quick" => opts.quick = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(opts)
}

fn main() -> ExitCode {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("amx-info: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let info = CapsInfo::gather();
    let clocks = Clocks::measure(opts.quick);
    let hardware = Hardware::measure(&info, &opts, &clocks);
    let syscalls = permission_costs(&info, opts.quick);
    let emulator = emu::run(opts.quick);
    // The ceiling the emulator is measured against: this core's own SIMD throughput for the
    // instructions its kernels issue (a few milliseconds).
    let simd = amx_runtime::peak::simd_peak();
    // Last: the engine, once installed, answers detection for the rest of the process.
    let trapped = trap_costs(opts.quick);

    if opts.json {
        let out = Output {
            tool: "amx-info",
            version: env!("CARGO_PKG_VERSION"),
            quick: opts.quick,
            usable: info.unavailable.is_none(),
            verdict: info.verdict(),
            capabilities: info.json(),
            clock: clocks.json(),
            hardware: hardware.json(&clocks),
            permission_syscalls: &syscalls,
            emulator: emulator_json(&emulator, &info, &simd),
            trap_engine: trap_json(&trapped),
        };
        match serde_json::to_string_pretty(&out) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("amx-info: the report did not serialize: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!(
            "{}",
            human(&info, &clocks, &hardware, &syscalls, &emulator, &simd, &opts)
        );
        print!("{}", trap_human(&trapped));
    }
    ExitCode::SUCCESS
}

/// The whole `--json` report.
#[derive(Serialize)]
struct Output<'a> {
    tool: &'static str,
    version: &'static str,
    quick: bool,
    usable: bool,
    verdict: String,
    capabilities: caps::CapsJson<'a>,
    clock: ClockJson,
    hardware: HardwareJson<'a>,
    permission_syscalls: &'a [Event],
    emulator: EmulatorJson<'a>,
    trap_engine: TrapJson<'a>,
}

/// The TSC frequency and the core clock ratios.
struct Clocks {
    /// TSC ticks per nanosecond.
    tsc_ghz: Option<Sample>,
    /// TSC ticks per core cycle with only scalar code running (ADD chain).
    idle_ticks_per_cycle: Option<Sample>,
    /// The same from an IMUL chain, as a cross-check.
    imul_ticks_per_cycle: Option<Sample>,
    method: &'static str,
}

impl Clocks {
    #[cfg(target_arch = "x86_64")]
    fn measure(quick: bool) -> Clocks {
        let (window, samples) = if quick { (5, 3) } else { (10, 5) };
        let tsc_ghz = clock::tsc_ghz(Duration::from_millis(window), samples);
        let reps = if quick { 5 } else { 15 };
        Clocks {
            tsc_ghz,
            idle_ticks_per_cycle: clock::ticks_per_cycle_idle(reps),
            imul_ticks_per_cycle: clock::ticks_per_cycle_imul(reps),
            method: if quick {
                "RDTSC against Instant, median of 3 windows of 5 ms"
            } else {
                "RDTSC against Instant, median of 5 windows of 10 ms"
            },
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn measure(_quick: bool) -> Clocks {
        Clocks {
            tsc_ghz: None,
            idle_ticks_per_cycle: None,
            imul_ticks_per_cycle: None,
            method: "no TSC off x86-64",
        }
    }

    fn tsc_ghz(&self) -> Option<f64> {
        self.tsc_ghz.map(|s| s.median)
    }

    /// Core GHz for a ratio of TSC ticks per core cycle.
    fn core_ghz(&self, ticks_per_cycle: Option<Sample>) -> Option<f64> {
        Some(self.tsc_ghz()? / ticks_per_cycle?.median)
    }

    fn json(&self) -> ClockJson {
        ClockJson {
            tsc_ghz: self.tsc_ghz,
            tsc_method: self.method,
            core_ghz_scalar: self.core_ghz(self.idle_ticks_per_cycle),
            core_scalar_method: "a chain of dependent one-cycle register ADDs, alone: GHz = TSC \
                                 GHz / TSC ticks per ADD",
            core_ghz_scalar_imul_check: self.core_ghz(self.imul_ticks_per_cycle),
        }
    }
}

/// The clock section of `--json`.
#[derive(Serialize)]
struct ClockJson {
    tsc_ghz: Option<Sample>,
    tsc_method: &'static str,
    core_ghz_scalar: Option<f64>,
    core_scalar_method: &'static str,
    core_ghz_scalar_imul_check: Option<f64>,
}

/// The hardware section: measured, or why not.
enum Hardware {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    Measured(Box<hw::HwReport>),
    Skipped(String),
}

impl Hardware {
    fn measure(info: &CapsInfo, opts: &Options, clocks: &Clocks) -> Hardware {
        if let Some(why) = &info.unavailable {
            return Hardware::Skipped(format!("AMX is not usable here: {why}"));
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        {
            let Some(tsc_ghz) = clocks.tsc_ghz() else {
                return Hardware::Skipped("the TSC frequency could not be measured".into());
            };
            match hw::run(&info.caps, opts.quick, tsc_ghz) {
                Ok(r) => Hardware::Measured(Box::new(r)),
                Err(e) => Hardware::Skipped(e),
            }
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        {
            let _ = (opts, clocks);
            Hardware::Skipped("AMX tile data is usable only on x86-64 Linux".into())
        }
    }

    fn json(&self, clocks: &Clocks) -> HardwareJson<'_> {
        match self {
            Hardware::Skipped(why) => {
                let _ = clocks;
                HardwareJson::Skipped {
                    measured: false,
                    reason: why,
                }
            }
            #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
            Hardware::Measured(r) => HardwareJson::Measured(Box::new(hw_json(r, clocks))),
        }
    }
}

/// The hardware section of `--json`: `measured` says which form it has.
#[derive(Serialize)]
#[serde(untagged)]
enum HardwareJson<'a> {
    Skipped {
        measured: bool,
        reason: &'a str,
    },
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    Measured(Box<HwJson<'a>>),
}

/// The silicon's measurements in `--json`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[derive(Serialize)]
struct HwJson<'a> {
    measured: bool,
    core_ghz_amx_interleaved: Option<f64>,
    core_ghz_amx_after_burst: Option<f64>,
    core_ghz_for_core_cycles: f64,
    core_clock_method: String,
    tdpfp16ps: String,
    instructions: Vec<InstructionJson<'a>>,
    events: &'a [Event],
    skipped: &'a [String],
}

/// One instruction's costs in `--json`.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[derive(Serialize)]
struct InstructionJson<'a> {
    instruction: &'a str,
    method: &'a str,
    latency: Option<CostJson>,
    reciprocal_throughput: Option<CostJson>,
    reference: &'a str,
    reference_check: Option<reference::Verdict>,
}

/// A cost in TSC cycles (median and spread), core cycles and ns (at the median).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[derive(Serialize)]
struct CostJson {
    tsc_cycles: Sample,
    core_cycles: f64,
    ns: f64,
}

/// TSC ticks per core cycle at the AMX clock, and how it was estimated.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn amx_ratio(r: &hw::HwReport, clocks: &Clocks) -> (Option<f64>, String) {
    if let Some(s) = r.clock.interleaved {
        return (
            Some(s.median),
            "the ADD chain interleaved with TDPBSSD, one per 32 ADDs".into(),
        );
    }
    if let Some(s) = r.clock.after_burst {
        return (
            Some(s.median),
            format!(
                "the ADD chain right after a {:.0} us TDPBSSD burst",
                r.clock.burst_us
            ),
        );
    }
    (
        clocks.idle_ticks_per_cycle.map(|s| s.median),
        "no AMX-load figure: the scalar clock is used".into(),
    )
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn hw_json<'a>(r: &'a hw::HwReport, clocks: &Clocks) -> HwJson<'a> {
    let tsc_ghz = clocks.tsc_ghz().unwrap_or(f64::NAN);
    let (ratio, how) = amx_ratio(r, clocks);
    let ratio = ratio.unwrap_or(f64::NAN);
    let cost = |s: Option<Sample>| {
        s.map(|s| CostJson {
            tsc_cycles: s,
            core_cycles: s.median / ratio,
            ns: s.median / tsc_ghz,
        })
    };
    let instructions = r
        .rows
        .iter()
        .map(|row| InstructionJson {
            instruction: row.instruction,
            method: row.method,
            latency: cost(row.latency),
            reciprocal_throughput: cost(row.throughput),
            reference: row.reference,
            reference_check: row.verdict(tsc_ghz),
        })
        .collect();
    HwJson {
        measured: true,
        core_ghz_amx_interleaved: clocks.core_ghz(r.clock.interleaved),
        core_ghz_amx_after_burst: clocks.core_ghz(r.clock.after_burst),
        core_ghz_for_core_cycles: tsc_ghz / ratio,
        core_clock_method: how,
        tdpfp16ps: r.fp16.text(),
        instructions,
        events: &r.events,
        skipped: &r.skipped,
    }
}

/// The permission system calls, timed on every machine (they answer even without AMX).
fn permission_costs(info: &CapsInfo, quick: bool) -> Vec<Event> {
    let target = Duration::from_millis(if quick { 2 } else { 10 });
    let reps = if quick { 3 } else { 9 };
    let outcome = match &info.request {
        Ok(()) => "granted".to_owned(),
        Err(e) => e.errno_name().unwrap_or("refused").to_owned(),
    };
    let mut out = vec![Event {
        name: "first permission request".into(),
        method: format!("request_permission(), one sample ({outcome})"),
        ns: Sample::of(&[info.request_ns]),
        // The reference is the cost of a granted request; a refusal is not comparable.
        reference: if info.request.is_ok() {
            "~0.5 us"
        } else {
            "- (~0.5 us when granted)"
        },
    }];
    out.push(Event {
        name: "ARCH_GET_XCOMP_PERM".into(),
        method: "permission_state(), repeated".into(),
        ns: per_call_ns(target, reps, || {
            std::hint::black_box(permit::permission_state());
        }),
        reference: "-",
    });
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        let mut rc = 0;
        let ns = per_call_ns(target, reps, || {
            // SAFETY: ARCH_REQ_XCOMP_PERM takes the feature number by value and touches no user
            // memory; asking again for a feature already granted (or refused) changes nothing.
            rc = unsafe {
                libc::syscall(
                    libc::SYS_arch_prctl,
                    libc::c_long::from(permit::ARCH_REQ_XCOMP_PERM),
                    libc::c_long::from(permit::XFEATURE_XTILEDATA),
                )
            };
        });
        out.push(Event {
            name: "ARCH_REQ_XCOMP_PERM again".into(),
            method: format!(
                "the raw system call, repeated ({})",
                if rc == 0 { "returns 0" } else { "fails" }
            ),
            ns,
            reference: if rc == 0 {
                "~0.5 us"
            } else {
                "- (~0.5 us when granted)"
            },
        });
    }
    out
}

/// The emulator section of `--json`: its rows and events, or the error.
#[derive(Serialize)]
struct EmulatorJson<'a> {
    is_process_backend: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<&'a [emu::EmuRow]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<&'a [Event]>,
    /// This core's SIMD peak for the emulator's kernels, per instruction family.
    simd_peak: SimdPeakJson,
}

/// One family's SIMD peak in `--json` (`null` where the emulator's kernel is the portable one).
#[derive(Serialize)]
struct PeakJson {
    kernel_path: String,
    sequence: &'static str,
    chains: u32,
    gops: f64,
}

#[derive(Serialize)]
struct SimdPeakJson {
    int8: Option<PeakJson>,
    float: Option<PeakJson>,
    /// The bf16 products' sequence: VDPBF16PS where the CPU passed the emulator's check, else
    /// the same as `float`.
    bf16: Option<PeakJson>,
}

fn peak_json(p: Option<amx_runtime::peak::Peak>) -> Option<PeakJson> {
    p.map(|p| PeakJson {
        kernel_path: p.path.to_string(),
        sequence: p.sequence,
        chains: p.chains,
        gops: p.gops(),
    })
}

/// The SIMD peak of the family `instruction` belongs to.
fn family_peak(
    simd: &amx_runtime::peak::SimdPeak,
    instruction: &str,
) -> Option<amx_runtime::peak::Peak> {
    match instruction {
        "TDPBF16PS" => simd.bf16,
        "TDPFP16PS" => simd.float,
        i if i.starts_with("TDPB") => simd.int8,
        _ => None,
    }
}

fn emulator_json<'a>(
    emulator: &'a Result<(Vec<emu::EmuRow>, Vec<Event>), String>,
    info: &CapsInfo,
    simd: &amx_runtime::peak::SimdPeak,
) -> EmulatorJson<'a> {
    let is_process_backend = matches!(info.process_backend, Ok(amx_runtime::Backend::Emulated));
    let simd_peak = SimdPeakJson {
        int8: peak_json(simd.int8),
        float: peak_json(simd.float),
        bf16: peak_json(simd.bf16),
    };
    match emulator {
        Err(e) => EmulatorJson {
            is_process_backend,
            error: Some(e),
            instructions: None,
            events: None,
            simd_peak,
        },
        Ok((rows, events)) => EmulatorJson {
            is_process_backend,
            error: None,
            instructions: Some(rows),
            events: Some(events),
            simd_peak,
        },
    }
}

/// One line: how many of the silicon's reference figures this run agrees with, and which not.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn reference_summary(r: &hw::HwReport, tsc_ghz: f64) -> String {
    let rows = r.rows.iter().filter_map(|row| {
        let v = row.verdict(tsc_ghz)?;
        Some((format!("{} ({})", row.instruction, row.method), v))
    });
    let events = r
        .events
        .iter()
        .filter_map(|e| Some((e.name.clone(), e.verdict()?)));
    let all: Vec<(String, reference::Verdict)> = rows.chain(events).collect();
    let off: Vec<String> = all
        .iter()
        .filter(|(_, v)| !v.within())
        .map(|(name, v)| format!("{name} {}", v.text()))
        .collect();
    let mut line = format!(
        "  reference check: {} of {} figures within {:.0}% of the reference",
        all.len() - off.len(),
        all.len(),
        100.0 * reference::TOLERANCE
    );
    if !off.is_empty() {
        line += &format!("; off: {}", off.join(", "));
    }
    line + "\n"
}

/// An events table: name, method, median (min..max) in the best unit, reference.
fn events_table(events: &[Event]) -> String {
    let mut t = Table::new(&[
        "cost",
        "measured as",
        ">median",
        ">min..max",
        "reference",
        "vs reference",
    ]);
    let unit = |ns: f64| -> String {
        if ns.abs() >= 1e6 {
            format!("{} ms", num(Some(ns / 1e6)))
        } else if ns.abs() >= 1e3 {
            format!("{} us", num(Some(ns / 1e3)))
        } else {
            format!("{} ns", num(Some(ns)))
        }
    };
    for e in events {
        let (median, range) = match e.ns {
            Some(s) if s.samples > 1 => {
                (unit(s.median), format!("{}..{}", unit(s.min), unit(s.max)))
            }
            Some(s) => (unit(s.median), String::new()),
            None => ("-".into(), String::new()),
        };
        t.row(vec![
            e.name.clone(),
            e.method.clone(),
            median,
            range,
            e.reference.into(),
            e.verdict().map_or("-".into(), |v| v.text()),
        ]);
    }
    t.render("  ", true)
}

fn human(
    info: &CapsInfo,
    clocks: &Clocks,
    hardware: &Hardware,
    syscalls: &[Event],
    emulator: &Result<(Vec<emu::EmuRow>, Vec<Event>), String>,
    simd: &amx_runtime::peak::SimdPeak,
    opts: &Options,
) -> String {
    let mut out = format!(
        "amx-info {}: can this process use Intel AMX, and what does each instruction cost?{}\n\n",
        env!("CARGO_PKG_VERSION"),
        if opts.quick { " (--quick)" } else { "" }
    );
    let bar = "=".repeat(78);
    out += &format!("{bar}\n{}\n{bar}\n\n", wrap(&info.verdict(), 78));

    out += "Capabilities\n";
    out += &info.text();
    out.push('\n');

    out += "Clocks\n";
    let tsc = clocks.tsc_ghz();
    out += &format!(
        "  TSC                 {} GHz ({})\n",
        num(tsc),
        clocks.method
    );
    out += &format!(
        "  core, scalar code   {} GHz (a chain of dependent one-cycle register ADDs, alone; a \
         chain of 3-cycle IMULs gives {} GHz)\n",
        num(clocks.core_ghz(clocks.idle_ticks_per_cycle)),
        num(clocks.core_ghz(clocks.imul_ticks_per_cycle)),
    );
    match hardware {
        Hardware::Skipped(why) => {
            out += "  core, AMX load      - (needs the silicon)\n\n";
            out += "Silicon: cost per instruction on this CPU\n";
            out += &format!("  skipped: {}\n\n", wrap(why, 76).replace('\n', "\n  "));
        }
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        Hardware::Measured(r) => out += &hw_human(r, clocks),
    }

    out += "Permission system calls (timed on every machine)\n";
    out += &events_table(syscalls);
    out.push('\n');

    out += &format!(
        "Emulator: software, bit-exact ({})\n",
        match &info.process_backend {
            Ok(amx_runtime::Backend::Emulated) => "this process's backend",
            Ok(_) => "not this process's backend",
            Err(_) => "this process has no backend: AMX_BACKEND is refused",
        }
    );
    match emulator {
        Err(e) => out += &format!("  failed: {e}\n"),
        Ok((rows, events)) => {
            let mut t = Table::new(&[
                "instruction",
                "shape",
                ">ns/instr",
                ">min..max",
                ">GOP/s",
                ">% SIMD peak",
            ]);
            for r in rows {
                let (median, range) = match (r.ns, &r.error) {
                    (_, Some(e)) => (format!("error: {e}"), String::new()),
                    (Some(s), None) => (
                        num(Some(s.median)),
                        format!("{}..{}", num(Some(s.min)), num(Some(s.max))),
                    ),
                    (None, None) => ("-".into(), String::new()),
                };
                t.row(vec![
                    r.instruction.into(),
                    r.method.into(),
                    median,
                    range,
                    r.gops().map_or(String::new(), |g| format!("{g:.1}")),
                    match (r.gops(), family_peak(simd, r.instruction)) {
                        (Some(g), Some(p)) => format!("{:.0}%", 100.0 * g / p.gops()),
                        _ => String::new(),
                    },
                ]);
            }
            out += &t.render("  ", true);
            out += "  GOP/s = 2 x M x N x K / time (M = N = 16; K = 64 int8 or 32 bf16/fp16)\n";
            out += "  dot products on the same tiles each time: what the emulator derives from A\n  \
                    and B (row sums, widened pairs) is computed once, as for tiles a kernel reuses\n";
            for (family, peak) in [("int8", simd.int8), ("bf16/fp16", simd.float)] {
                out += &match peak {
                    Some(p) => format!("  SIMD peak of this core for the {family} kernel: {p}\n"),
                    None => format!("  SIMD peak for the {family} kernel: none (portable path)\n"),
                };
            }
            if amx_runtime::peak::bf16_pairs() {
                if let Some(p) = simd.bf16 {
                    out += &format!(
                        "  bf16 runs VDPBF16PS, two k-steps per instruction (K even), after this \
                         CPU passed the emulator's check: {p}\n"
                    );
                }
            }
            out += &events_table(events);
        }
    }
    out
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn hw_human(r: &hw::HwReport, clocks: &Clocks) -> String {
    let tsc_ghz = clocks.tsc_ghz().unwrap_or(f64::NAN);
    let (ratio, how) = amx_ratio(r, clocks);
    let ratio = ratio.unwrap_or(f64::NAN);
    let mut out = String::new();
    let scalar = clocks.core_ghz(clocks.idle_ticks_per_cycle);
    let amx = clocks.core_ghz(r.clock.interleaved);
    out += &format!(
        "  core, AMX load      {} GHz (the ADD chain interleaved with TDPBSSD, one per 32 ADDs); \
         {} GHz right after a {:.0} us TDPBSSD burst\n",
        num(amx),
        num(clocks.core_ghz(r.clock.after_burst)),
        r.clock.burst_us
    );
    if let (Some(scalar), Some(amx)) = (scalar, amx) {
        out += &format!(
            "                      {:.1}% below the scalar clock (reference: ~14%)\n",
            100.0 * (1.0 - amx / scalar)
        );
    }
    out += &format!(
        "  core cycles below   TSC cycles / {} TSC ticks per core cycle ({how})\n\n",
        num(Some(ratio))
    );

    out += "Silicon: cost per instruction on this CPU (median; TSC = TSC cycles, core = core cycles at the AMX clock)\n";
    let mut t = Table::new(&[
        "instruction",
        "measured as",
        ">lat TSC",
        ">core",
        ">ns",
        ">tput TSC",
        ">core",
        ">ns",
        "reference (SPR-class silicon)",
        "vs reference",
    ]);
    let cells = |s: Option<Sample>| -> [String; 3] {
        let m = s.map(|s| s.median);
        [
            num(m),
            num(m.map(|x| x / ratio)),
            num(m.map(|x| x / tsc_ghz)),
        ]
    };
    for row in &r.rows {
        let [lt, lc, ln] = cells(row.latency);
        let [tt, tc, tn] = cells(row.throughput);
        t.row(vec![
            row.instruction.into(),
            row.method.into(),
            lt,
            lc,
            ln,
            tt,
            tc,
            tn,
            row.reference.into(),
            row.verdict(tsc_ghz).map_or("-".into(), |v| v.text()),
        ]);
    }
    out += &t.render("  ", true);
    out += &format!("  {}\n", r.fp16.text());
    for s in &r.skipped {
        out += &format!("  skipped: {s}\n");
    }
    out.push('\n');
    out += "Silicon: one-off and per-call costs\n";
    out += &events_table(&r.events);
    out += &reference_summary(r, tsc_ghz);
    out.push('\n');
    out
}

/// Wraps `text` at spaces so no line exceeds `width` characters (longer words stay whole).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0usize;
    for word in text.split(' ') {
        let len = word.chars().count();
        if line > 0 && line + 1 + len > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out += word;
        line += len;
    }
    out
}

/// The trap engine's rows, or why it was not timed.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
type TrapCosts = Result<Vec<trap::TrapRow>, String>;
#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
type TrapCosts = Result<Vec<()>, String>;

fn trap_costs(quick: bool) -> TrapCosts {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        trap::run(quick)
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        let _ = quick;
        Err("the trap engine runs only on x86-64 Linux".into())
    }
}

/// The trap engine section of `--json`: why it was not timed, or its rows.
#[derive(Serialize)]
#[serde(untagged)]
enum TrapJson<'a> {
    Skipped {
        skipped: &'a str,
    },
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    Timed {
        patching: bool,
        rows: &'a [trap::TrapRow],
    },
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    Timed {},
}

fn trap_json(costs: &TrapCosts) -> TrapJson<'_> {
    match costs {
        Err(why) => TrapJson::Skipped { skipped: why },
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        Ok(rows) => TrapJson::Timed {
            patching: amx_trap::patching(),
            rows,
        },
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        Ok(_) => TrapJson::Timed {},
    }
}

fn trap_human(costs: &TrapCosts) -> String {
    let mut out =
        String::from("\nTrap engine: the silicon code path on a CPU without AMX (trap::install)\n");
    match costs {
        Err(why) => out += &format!("  not timed: {}\n", wrap(why, 76).replace('\n', "\n  ")),
        #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
        Ok(rows) => {
            let mut t = Table::new(&[
                "instruction",
                ">emulator ns",
                ">trapped first ns",
                ">trapped repeat ns",
                ">repeat/emulator",
            ]);
            for r in rows {
                let med = |s: Option<Sample>| num(s.map(|s| s.median));
                t.row(vec![
                    r.instruction.into(),
                    med(r.emulator),
                    med(r.first),
                    med(r.repeat),
                    r.repeat_over_emulator
                        .map_or("-".into(), |x| format!("{x:.1}x")),
                ]);
            }
            out += &t.render("  ", true);
            out +=
                "  first: a signal round trip per instruction (patching off); repeat: the site\n";
            out +=
                "  patched into a jump to a stub that calls the emulator (AMX_TRAP_PATCH=0: off)\n";
        }
        #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
        Ok(_) => {}
    }
    out
}
