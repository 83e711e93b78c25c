//! Measuring the host and `amx-gemm`: the tile unit's peak, the memory bandwidth, and timed,
//! checked GEMM runs. `amx-bench` and the GEMM benchmark are thin layers over this module.
//!
//! - [`Harness::peak`]: a register-only loop of tile dot products (4 independent C tiles, A and
//!   B loaded once, no memory traffic), after a warm-up, on that many threads at once. This is
//!   the compute roof: it includes the clock the CPU runs at under AMX load. The loop runs on
//!   the typed tiles of a `tilecfg!` layout, the path the GEMM's full micro-tiles take (on the
//!   silicon, unchecked instructions).
//! - [`Harness::bandwidth`]: read GB/s of a buffer larger than L2 (at least the size of B),
//!   each thread reading its own part, after a first pass that faults the pages in.
//! - [`Harness::run`]: random inputs, B packed (timed separately), warm-up (the silicon wakes
//!   its AMX unit in ~2.8 us after 5 us idle and the first tile instruction of a thread traps
//!   once), then the median of timed repetitions, and a check against `amx_gemm::reference`.
//!   A shape whose buffers together exceed the memory the OS reports available is refused
//!   before anything is allocated ([`MeasureError::InsufficientMemory`]).
//! - [`Harness::scaling`]: the same case on 1 thread and on more, their repetitions
//!   alternating, and the median over adjacent pairs of the 1-thread time over the other's.
//!
//! ## Paired figures
//!
//! A shared host may change speed while it is measured (another tenant's load, a clock or
//! power state that lasts seconds to minutes): a GEMM timed in a slow spell and divided by a
//! peak measured once, in a fast one, describes the host, not the code. So every figure that
//! compares two measurements also takes them side by side and keeps the median of the per-pair
//! ratios, which holds where the absolute figures move:
//!
//! - on the silicon, each timed repetition of [`Harness::run`] follows a short sample of the
//!   peak loop on the same threads ([`PAIRED_PEAK_TIME`]):
//!   [`Report::paired_percent_of_peak`] is the median over repetitions of the repetition's
//!   rate over its sample's. The peak measured once ([`Report::peak_gops`]) stays in the
//!   report: it is the roof of the roofline;
//! - oneDNN's repetitions alternate with ours ([`PeerReport::ratio`]);
//! - [`Harness::scaling`] alternates 1-thread and many-thread repetitions
//!   ([`Scaling::speedup`]).

use std::collections::HashMap;
use std::fmt;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amx_gemm::pack::MR;
use amx_gemm::rayon::{ThreadPool, ThreadPoolBuilder};
use amx_gemm::reference::{self, Outputs};
use amx_gemm::{
    bf16, Backend, Bf16, Bf8, Bf8Bf8, Bf8Hf8, Blocking, CStores, Fp16, Gemm, GemmError, Hf8,
    Hf8Bf8, Hf8Hf8, Int8, Mode, Operand, PackedB, Precision, PrecisionKind, S8U8, U8S8, U8U8,
};
use amx_runtime::{configure_typed_on, ROW_BYTES};
use amx_test_support::{Random, SplitMix64};
use serde::{Serialize, Serializer};

use crate::onednn::Peer;
use crate::stats::Sample;

/// `f::<P>(..)` for the precision type `P` of a [`PrecisionKind`], or
/// [`MeasureError::UnsupportedPrecision`]: one dispatch for every measurement.
macro_rules! by_precision {
    ($kind:expr, |$p:ident| $call:expr) => {
        match $kind {
            PrecisionKind::Int8 => {
                type $p = Int8;
                $call
            }
            PrecisionKind::U8S8 => {
                type $p = U8S8;
                $call
            }
            PrecisionKind::Bf16 => {
                type $p = Bf16;
                $call
            }
            PrecisionKind::S8U8 => {
                type $p = S8U8;
                $call
            }
            PrecisionKind::U8U8 => {
                type $p = U8U8;
                $call
            }
            PrecisionKind::Fp16 => {
                type $p = Fp16;
                $call
            }
            PrecisionKind::Bf8Bf8 => {
                type $p = Bf8Bf8;
                $call
            }
            PrecisionKind::Hf8Hf8 => {
                type $p = Hf8Hf8;
                $call
            }
            PrecisionKind::Bf8Hf8 => {
                type $p = Bf8Hf8;
                $call
            }
            PrecisionKind::Hf8Bf8 => {
                type $p = Hf8Bf8;
                $call
            }
            other => Err(MeasureError::UnsupportedPrecision(other)),
        }
    };
}

/// Why a measurement did not run.
#[derive(Clone, Debug, PartialEq)]
pub enum MeasureError {
    /// A precision this harness has no measurement for.
    UnsupportedPrecision(PrecisionKind),
    /// The GEMM, the packing or the tiles of the peak loop refused or failed.
    Gemm(GemmError),
    /// A buffer's size in bytes does not fit the address space.
    TooLarge {
        /// The matrix.
        operand: Operand,
    },
    /// More threads than a GEMM accepts ([`Gemm::MAX_THREADS`]).
    TooManyThreads {
        /// The thread count asked for.
        requested: usize,
        /// The largest thread count allowed.
        max: usize,
    },
    /// The measuring threads could not be started.
    ThreadPool(String),
    /// A buffer of this many bytes could not be allocated.
    OutOfMemory {
        /// The size asked for, in bytes.
        bytes: usize,
    },
    /// The run needs more memory than the OS reports available, checked before anything is
    /// allocated: Linux overcommits, so a too-large run would otherwise be killed by the OOM
    /// killer while its inputs are filled, minutes later, instead of failing at once.
    InsufficientMemory {
        /// Bytes the run's buffers need together.
        needed: u64,
        /// Bytes the OS reports available (`MemAvailable` on Linux).
        available: u64,
    },
}

impl fmt::Display for MeasureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MeasureError::Gemm(e) => e.fmt(f),
            MeasureError::UnsupportedPrecision(p) => write!(f, "no measurement of {p} GEMMs"),
            MeasureError::TooLarge { operand } => write!(f, "{operand} is too large to address"),
            MeasureError::TooManyThreads { requested, max } => write!(
                f,
                "{requested} worker threads requested; at most {max} are allowed"
            ),
            MeasureError::ThreadPool(why) => write!(f, "cannot start the measuring threads: {why}"),
            MeasureError::OutOfMemory { bytes } => {
                write!(f, "cannot allocate a buffer of {bytes} bytes")
            }
            MeasureError::InsufficientMemory { needed, available } => {
                let gib = |b: &u64| *b as f64 / (1u64 << 30) as f64;
                write!(
                    f,
                    "the run needs {:.1} GiB of buffers; the system has {:.1} GiB available",
                    gib(needed),
                    gib(available)
                )
            }
        }
    }
}

// Display prints the GEMM error's own message, so the chain continues below it.
impl std::error::Error for MeasureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MeasureError::Gemm(e) => e.source(),
            _ => None,
        }
    }
}

impl From<GemmError> for MeasureError {
    fn from(e: GemmError) -> Self {
        MeasureError::Gemm(e)
    }
}

/// `len` random elements of the test-data stream `seed`, or [`MeasureError::OutOfMemory`]
/// when they cannot be allocated (a harness input may be as large as the caller asks).
fn try_random<T: Random>(len: usize, seed: u64) -> Result<Vec<T>, MeasureError> {
    let mut out = try_vec(len)?;
    let mut rng = SplitMix64::new(seed);
    out.extend((0..len).map(|_| T::from_unit(rng.unit())));
    Ok(out)
}

/// An empty vector with room for `len` elements, or [`MeasureError::OutOfMemory`].
fn try_vec<T>(len: usize) -> Result<Vec<T>, MeasureError> {
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| MeasureError::OutOfMemory {
            bytes: len.saturating_mul(std::mem::size_of::<T>()),
        })?;
    Ok(out)
}

/// Bytes of memory the OS can hand out without swapping (`MemAvailable` of `/proc/meminfo`),
/// or `None` where that is not known. Read by hand: no small crate reads this one figure.
pub fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// [`MeasureError::InsufficientMemory`] when `needed` bytes exceed what the OS reports
/// available. `try_reserve` cannot see this: Linux overcommits.
fn check_footprint(needed: u128, available: Option<u64>) -> Result<(), MeasureError> {
    match available {
        Some(available) if needed > u128::from(available) => {
            Err(MeasureError::InsufficientMemory {
                needed: u64::try_from(needed).unwrap_or(u64::MAX),
                available,
            })
        }
        _ => Ok(()),
    }
}

/// The thread count of a GEMM configured with `threads` (0: one per core), refused above
/// [`Gemm::MAX_THREADS`] as a GEMM call refuses it.
fn thread_count(threads: usize) -> Result<usize, MeasureError> {
    let requested = Gemm::new().threads(threads).thread_count();
    if requested > Gemm::MAX_THREADS {
        return Err(MeasureError::TooManyThreads {
            requested,
            max: Gemm::MAX_THREADS,
        });
    }
    Ok(requested)
}

/// How long each paired sample of the peak loop runs on the silicon, after
/// [`PAIRED_PEAK_WARMUP`] (see the [module docs](self#paired-figures)).
///
/// Short against the host's spells (seconds to minutes), so a sample and the repetition next
/// to it run in the same one, and about as long as a 1024^3 to 2048^3 repetition (1-10 ms), so
/// neither stands for a much longer stretch than the other. Long enough to be exact: the loop
/// reads the clock between batches of 4 096 rounds (about 85 us), and counts the time it
/// actually ran, so the last batch's overshoot costs no accuracy; 3 ms are some 35 batches.
/// Twenty repetitions add about 70 ms to a case.
pub const PAIRED_PEAK_TIME: Duration = Duration::from_millis(3);

/// The warm-up of each paired peak sample. The repetition just before left the unit awake and
/// its clock at the AMX level; what is left to absorb is the loop's own start (its batches
/// double from 1 round to 4 096 in about 0.2 ms), a first tile instruction on a measuring
/// thread (its one trap, tens of microseconds) and the unit's wake-up after the few
/// microseconds of set-up (about 2.8 us).
pub const PAIRED_PEAK_WARMUP: Duration = Duration::from_micros(500);

/// The median over pairs of `numerators[i] / denominators[i]`: the figure of measurements
/// taken side by side, each pair under the same load of the host. Pairs beyond the shorter
/// slice are ignored, and a ratio that is not finite (a zero or missing denominator) is
/// dropped; `None` when no pair is left.
pub fn median_of_ratios(numerators: &[f64], denominators: &[f64]) -> Option<f64> {
    let ratios: Vec<f64> = numerators
        .iter()
        .zip(denominators)
        .map(|(x, y)| x / y)
        .collect();
    Sample::of(&ratios).map(|s| s.median)
}

/// The paired share of the peak, in percent: the median over repetitions of the GEMM's rate
/// over the rate of the peak sample taken beside it (both in GOP/s, in the same order).
pub fn paired_percent(gemm_gops: &[f64], peak_gops: &[f64]) -> Option<f64> {
    median_of_ratios(gemm_gops, peak_gops).map(|r| 100.0 * r)
}

/// The compute roof of the tile unit, measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Peak {
    /// Operations per second of all threads together, in 10^9.
    pub gops: f64,
    /// Threads that ran the loop at once.
    pub threads: usize,
    /// Seconds of warm-up before timing.
    pub warmup_s: f64,
}

/// One GEMM to time and check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    /// Precision.
    pub dtype: PrecisionKind,
    /// Rows of A and C.
    pub m: usize,
    /// Columns of B and C.
    pub n: usize,
    /// Columns of A, rows of B.
    pub k: usize,
    /// Worker threads (0: one per core).
    pub threads: usize,
    /// Timed repetitions (at least 1).
    pub reps: usize,
    /// Backend (`None`: the process's).
    pub backend: Option<Backend>,
    /// Overwrite or accumulate.
    pub mode: Mode,
    /// How C is written ([`Gemm::c_stores`]).
    pub c_stores: CStores,
}

impl Case {
    /// An upper bound of the bytes [`Harness::run`] allocates for this case (on top of what
    /// the process already holds): A and B, packed B, C twice (the starting values and the
    /// result), the reference check's `f64` copy of B and its per-row work, the bandwidth
    /// buffer, every GEMM worker's packed-A block, and a margin for the small rest (thread
    /// pools, the peak loop's operands, the report). `Harness::run` refuses a case whose bound
    /// exceeds the memory available before it allocates anything.
    ///
    /// # Errors
    /// [`MeasureError::TooLarge`] when a buffer's size overflows,
    /// [`MeasureError::TooManyThreads`] for a thread count a GEMM refuses.
    pub fn footprint(&self) -> Result<u128, MeasureError> {
        self.footprint_with(thread_count(self.threads)?)
    }

    /// [`footprint`](Case::footprint) with `workers` GEMM workers keeping their packed-A
    /// blocks (each thread keeps its own between calls): [`Harness::scaling`] runs the case on
    /// the calling thread too, one worker more than its thread count.
    fn footprint_with(&self, workers: usize) -> Result<u128, MeasureError> {
        by_precision!(self.dtype, |P| self.footprint_of::<P>(workers))
    }

    fn footprint_of<P: Precision>(&self, workers: usize) -> Result<u128, MeasureError> {
        use std::mem::size_of;
        let Case { m, n, k, .. } = *self;
        // Every product of two `usize` fits u128; sums of a few of them too. Three factors
        // could not, so each is checked.
        let bytes = |elements: u128, size: usize, operand| {
            elements
                .checked_mul(size as u128)
                .ok_or(MeasureError::TooLarge { operand })
        };
        let (m, n, k) = (m as u128, n as u128, k as u128);
        let a = bytes(m * k, size_of::<P::A>(), Operand::A)?;
        let b = bytes(k * n, size_of::<P::B>(), Operand::B)?;
        // Its one documented error: the packed size does not fit the address space.
        let packed =
            PackedB::<P>::bytes_for(self.k, self.n).map_err(|_| MeasureError::TooLarge {
                operand: Operand::B,
            })? as u128;
        let c = bytes(m * n, size_of::<P::C>(), Operand::C)?;
        // The reference: B widened to f64, and per checked row its results and magnitudes,
        // the list of columns and the rows' column lists (`reference::verify`).
        // `m + n` is below 2^65, so `32 * (m + n)` fits; the sums below are checked.
        let check = bytes(k * n, size_of::<f64>(), Operand::B)?
            .checked_add(32 * (m + n) + (64 << 10))
            .ok_or(MeasureError::TooLarge {
                operand: Operand::B,
            })?;
        let bandwidth = (b.max(MIN_BANDWIDTH_BYTES as u128) / 8) * 8;
        // Each GEMM worker's packed-A block: `mc` rows of all of K, or of as many `kc` blocks
        // as fit 1 MiB (at least one), for its full micro-rows, and one micro-panel (MR rows)
        // of all of K for a last micro-row of its own. Calls use the backend's blocking (the
        // process's backend when the case names none). `tests/footprint.rs` holds the GEMM to
        // this.
        let blocking = self
            .backend
            .or_else(|| amx_runtime::backend().ok())
            .map_or(Blocking::DEFAULT, Blocking::for_backend);
        let steps = self.k.div_ceil(P::KIND.k_per_step()) as u128;
        let rows = m.min(blocking.mc as u128);
        let row_bytes = ROW_BYTES as u128;
        // `rows` is at most `mc` and a k-step's bytes fit a usize: these products fit u128.
        let kc_block = rows * steps.min(blocking.kc_steps as u128) * row_bytes;
        let chunk = (rows * steps * row_bytes).min((1u128 << 20).max(kc_block));
        let per_worker = MR as u128 * steps * row_bytes + chunk;
        // On the emulator a floating-point product also keeps its packed A widened to f32
        // (`amx_runtime::block::PreparedA`, where the float kernel reads it): twice the bytes.
        let float = matches!(
            P::KIND.dot_kind(),
            Some(amx_runtime::rules::DotKind::Tdpbf16ps | amx_runtime::rules::DotKind::Tdpfp16ps)
        );
        let emulated =
            self.backend.or_else(|| amx_runtime::backend().ok()) != Some(Backend::Hardware);
        let per_worker = if float && emulated {
            3 * per_worker
        } else {
            per_worker
        };
        let scratch = per_worker * workers as u128;
        // A sum past u128 (each part fits, not all of them together) is the largest operand's
        // fault.
        let largest = [(a, Operand::A), (b, Operand::B), (c, Operand::C)]
            .into_iter()
            .max_by_key(|&(bytes, _)| bytes)
            .map_or(Operand::C, |(_, operand)| operand);
        [a, b, packed, c, c, check, bandwidth, scratch, MARGIN]
            .into_iter()
            .try_fold(0u128, u128::checked_add)
            .ok_or(MeasureError::TooLarge { operand: largest })
    }
}

/// What a run allocates besides its buffers (pools, the peak loop's operands, the report).
const MARGIN: u128 = 4 << 20;

/// What [`Harness::run`] measured for one [`Case`]. Serializes as one flat JSON object (see
/// the `Serialize` impl), the line `amx-bench --json` prints.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The case run.
    pub case: Case,
    /// Threads used.
    pub threads: usize,
    /// Backend the tiles ran on.
    pub backend: Backend,
    /// Seconds to pack B (not part of the multiply's time).
    pub pack_s: f64,
    /// Median seconds of one multiply.
    pub median_s: f64,
    /// Fastest multiply.
    pub min_s: f64,
    /// Median CPU seconds of one multiply, all threads together (see
    /// [`process_cpu_s`](crate::timing::process_cpu_s)); `None` where the clock is missing.
    pub median_cpu_s: Option<f64>,
    /// `2 m n k / median_s`, in 10^9 per second.
    pub gops: f64,
    /// The measured compute roof for this precision, backend and thread count, measured once
    /// per process ([`Harness::peak`]); the roof of the roofline.
    pub peak_gops: f64,
    /// On the silicon: the median of the short peak samples taken beside the timed
    /// repetitions, one each, on the same threads ([`PAIRED_PEAK_TIME`]). `None` on the
    /// emulator and the trap engine, whose roofs do not move with the host's clock the same
    /// way and are compared against their own peaks.
    pub paired_peak_gops: Option<f64>,
    /// On the silicon: the median over repetitions of the repetition's rate over the rate of
    /// the peak sample taken just before it, in percent. Both ran under the same state of the
    /// host, so this describes the code where [`percent_of_peak`](Report::percent_of_peak)
    /// also carries the host's change of speed between the case and the peak's one
    /// measurement. `None` where [`paired_peak_gops`](Report::paired_peak_gops) is.
    pub paired_percent_of_peak: Option<f64>,
    /// Read bandwidth of a buffer the size of B (at least 8 MiB), GB/s.
    pub bandwidth_gbps: f64,
    /// `bandwidth x (2 m n k) / bytes of B`: the rate if reading B once were the limit.
    pub bandwidth_roofline_gops: f64,
    /// The lesser of the compute peak and the bandwidth roofline.
    pub roofline_gops: f64,
    /// On the emulator: the cores' own SIMD peak for the instructions the emulator's kernels
    /// issue for this precision (VPDPBUSD or VPMADDWD for int8, VFMADD231PS for the float
    /// formats, VDPBF16PS for bf16 where [`amx_runtime::peak::bf16_pairs`]; see
    /// [`amx_runtime::peak`]), summed over the threads, measured in the same process. `None`
    /// on the silicon, and where the emulator runs its portable kernels.
    pub simd_peak_gops: Option<f64>,
    /// Multiplies run before timing.
    pub warmup_runs: usize,
    /// Seconds they took.
    pub warmup_s: f64,
    /// Seconds of the very first multiply (thread start, configuration loads, first-use trap).
    pub first_run_s: f64,
    /// LDTILECFGs issued by the timed runs, all together (0 when every worker already held its
    /// configurations; on the silicon a 1-thread case loads its configuration again after each
    /// paired peak sample, which ran on the same thread and released its tiles).
    pub timed_loads: u64,
    /// `Ok(what was compared)` or the mismatch / error.
    pub check: Result<String, String>,
    /// oneDNN's matmul timed in the same process ([`Harness::peer`]), or why it could not run;
    /// `None` without a peer.
    pub peer: Option<Result<PeerReport, String>>,
}

/// oneDNN's matmul of the same case, its repetitions interleaved with `amx-gemm`'s.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerReport {
    /// Median seconds of one product.
    pub median_s: f64,
    /// `2 m n k / median_s`, in 10^9 per second.
    pub gops: f64,
    /// The median, over repetitions, of `amx-gemm`'s rate over oneDNN's in the adjacent
    /// repetition: above 1 when `amx-gemm` is faster. Adjacent pairs ran under the same load
    /// of the host, so this holds where the absolute figures move.
    pub ratio: f64,
    /// Whether oneDNN's C equals `amx-gemm`'s: `Ok(what was compared)` or the difference.
    pub check: Result<String, String>,
}

impl Report {
    /// Whether reading B bounds this shape: the bandwidth roofline is below the compute peak.
    pub fn b_bound(&self) -> bool {
        self.bandwidth_roofline_gops < self.peak_gops
    }

    /// `gops` as a percentage of the compute peak.
    pub fn percent_of_peak(&self) -> f64 {
        100.0 * self.gops / self.peak_gops
    }

    /// `gops` as a percentage of the roofline (the lesser roof).
    pub fn percent_of_roofline(&self) -> f64 {
        100.0 * self.gops / self.roofline_gops
    }

    /// `gops` as a percentage of [`simd_peak_gops`](Report::simd_peak_gops), where measured.
    pub fn percent_of_simd_peak(&self) -> Option<f64> {
        self.simd_peak_gops.map(|peak| 100.0 * self.gops / peak)
    }

    /// The fastest multiply's rate (`2 m n k / min_s`) as a percentage of
    /// [`simd_peak_gops`](Report::simd_peak_gops), where measured: on a shared machine the
    /// median carries the other tenants' load, the fastest repetition less of it.
    pub fn best_percent_of_simd_peak(&self) -> Option<f64> {
        let c = &self.case;
        let ops = 2.0 * c.m as f64 * c.n as f64 * c.k as f64;
        self.simd_peak_gops
            .map(|peak| 100.0 * ops / self.min_s / 1e9 / peak)
    }

    /// The multiply's rate over its CPU time rather than its wall time
    /// ([`median_cpu_s`](Report::median_cpu_s), divided among the threads) as a percentage of
    /// [`simd_peak_gops`](Report::simd_peak_gops), where both are measured: on a machine whose
    /// cores other processes share, what the run would reach with the cores to itself (the
    /// peak is the best of short batches, so it carries little of the others' load either).
    /// On a quiet machine it is close to [`percent_of_simd_peak`](Report::percent_of_simd_peak).
    pub fn cpu_percent_of_simd_peak(&self) -> Option<f64> {
        let c = &self.case;
        let ops = 2.0 * c.m as f64 * c.n as f64 * c.k as f64;
        let per_thread_s = self.median_cpu_s? / self.threads.max(1) as f64;
        self.simd_peak_gops
            .map(|peak| 100.0 * ops / per_thread_s / 1e9 / peak)
    }
}

/// The JSON form of a [`Report`]: the case's fields and the figures side by side, names
/// stable for scripts (`scripts/silicon-check` reads them). Non-finite figures print as
/// `null`.
#[derive(Serialize)]
struct Record<'a> {
    dtype: &'static str,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    backend: String,
    mode: &'static str,
    c_stores: &'static str,
    reps: usize,
    median_s: f64,
    min_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    median_cpu_s: Option<f64>,
    gops: f64,
    peak_gops: f64,
    bandwidth_gbps: f64,
    bandwidth_roofline_gops: f64,
    roofline_gops: f64,
    percent_of_peak: f64,
    /// Only on the silicon (see [`Report::paired_percent_of_peak`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    paired_peak_gops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    paired_percent_of_peak: Option<f64>,
    percent_of_roofline: f64,
    /// Only on the emulator (see [`Report::simd_peak_gops`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    simd_peak_gops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    percent_of_simd_peak: Option<f64>,
    /// The fastest repetition's share (see [`Report::best_percent_of_simd_peak`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    best_percent_of_simd_peak: Option<f64>,
    /// The share over CPU time (see [`Report::cpu_percent_of_simd_peak`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_percent_of_simd_peak: Option<f64>,
    b_bound: bool,
    pack_s: f64,
    warmup_runs: usize,
    warmup_s: f64,
    first_run_s: f64,
    timed_tile_config_loads: u64,
    /// oneDNN in the same process (`--onednn`), where asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_gops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_median_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_to_peer: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_check: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peer_error: Option<&'a str>,
    /// `"ok"`, or what failed.
    check: &'a str,
    /// What was compared, when the check passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    check_detail: Option<&'a str>,
}

/// A check's two JSON fields: `"ok"` with what was compared, or what failed.
fn check_fields(check: &Result<String, String>) -> (&str, Option<&str>) {
    match check {
        Ok(what) => ("ok", Some(what.as_str())),
        Err(why) => (why.as_str(), None),
    }
}

impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = &self.case;
        let (check, check_detail) = check_fields(&self.check);
        Record {
            dtype: c.dtype.name(),
            m: c.m,
            n: c.n,
            k: c.k,
            threads: self.threads,
            backend: self.backend.to_string(),
            mode: mode_name(c.mode),
            c_stores: c_stores_name(c.c_stores),
            reps: c.reps,
            median_s: self.median_s,
            min_s: self.min_s,
            median_cpu_s: self.median_cpu_s,
            gops: self.gops,
            peak_gops: self.peak_gops,
            bandwidth_gbps: self.bandwidth_gbps,
            bandwidth_roofline_gops: self.bandwidth_roofline_gops,
            roofline_gops: self.roofline_gops,
            percent_of_peak: self.percent_of_peak(),
            paired_peak_gops: self.paired_peak_gops,
            paired_percent_of_peak: self.paired_percent_of_peak,
            percent_of_roofline: self.percent_of_roofline(),
            simd_peak_gops: self.simd_peak_gops,
            percent_of_simd_peak: self.percent_of_simd_peak(),
            best_percent_of_simd_peak: self.best_percent_of_simd_peak(),
            cpu_percent_of_simd_peak: self.cpu_percent_of_simd_peak(),
            b_bound: self.b_bound(),
            pack_s: self.pack_s,
            warmup_runs: self.warmup_runs,
            warmup_s: self.warmup_s,
            first_run_s: self.first_run_s,
            timed_tile_config_loads: self.timed_loads,
            peer_gops: self
                .peer
                .as_ref()
                .and_then(|p| p.as_ref().ok())
                .map(|p| p.gops),
            peer_median_s: self
                .peer
                .as_ref()
                .and_then(|p| p.as_ref().ok())
                .map(|p| p.median_s),
            ratio_to_peer: self
                .peer
                .as_ref()
                .and_then(|p| p.as_ref().ok())
                .map(|p| p.ratio),
            peer_check: self
                .peer
                .as_ref()
                .and_then(|p| p.as_ref().ok())
                .map(|p| match &p.check {
                    Ok(_) => "ok",
                    Err(why) => why.as_str(),
                }),
            peer_error: self
                .peer
                .as_ref()
                .and_then(|p| p.as_ref().err())
                .map(String::as_str),
            check,
            check_detail,
        }
        .serialize(serializer)
    }
}

/// Measures and caches the host's roofs, and times GEMM cases against them.
#[derive(Debug)]
pub struct Harness {
    peaks: HashMap<(PrecisionKind, usize, Backend), Peak>,
    bandwidths: HashMap<(usize, usize), f64>,
    simd_peaks: HashMap<(PrecisionKind, usize), Option<f64>>,
    /// The measuring threads of the peak loop and the bandwidth, per thread count.
    pools: HashMap<usize, Arc<ThreadPool>>,
    /// How long the peak loop runs after its warm-up, per measurement.
    pub peak_time: Duration,
    /// oneDNN, to time beside every case ([`Report::peer`]); `None` (the default) runs
    /// `amx-gemm` alone.
    pub peer: Option<Peer>,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

/// Buffers smaller than this are not used for the bandwidth roof: it must exceed the L2 of
/// every core (2 MiB on Sapphire Rapids).
pub const MIN_BANDWIDTH_BYTES: usize = 8 << 20;

impl Harness {
    /// A harness with nothing measured yet.
    pub fn new() -> Harness {
        Harness {
            peaks: HashMap::new(),
            bandwidths: HashMap::new(),
            simd_peaks: HashMap::new(),
            pools: HashMap::new(),
            peak_time: Duration::from_millis(200),
            peer: None,
        }
    }

    /// `threads` measuring threads (more than one), started once and kept.
    fn pool(&mut self, threads: usize) -> Result<Arc<ThreadPool>, MeasureError> {
        if let Some(pool) = self.pools.get(&threads) {
            return Ok(Arc::clone(pool));
        }
        let pool = ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("amx-measure-{i}"))
            .build()
            .map_err(|e| MeasureError::ThreadPool(e.to_string()))?;
        let pool = Arc::new(pool);
        self.pools.insert(threads, Arc::clone(&pool));
        Ok(pool)
    }

    /// The tile unit's peak for `dtype` on `threads` threads (0: one per core) and `backend`
    /// (`None`: the process's), measured once and cached.
    pub fn peak(
        &mut self,
        dtype: PrecisionKind,
        threads: usize,
        backend: Option<Backend>,
    ) -> Result<Peak, MeasureError> {
        let threads = thread_count(threads)?;
        let backend = options(threads, backend).resolved_backend()?;
        if let Some(p) = self.peaks.get(&(dtype, threads, backend)) {
            return Ok(*p);
        }
        let warmup = match backend {
            Backend::Hardware => Duration::from_millis(50),
            _ => Duration::from_millis(10),
        };
        let pool = self.measuring_pool(threads)?;
        let peak = peak_on(dtype, backend, pool.as_deref(), warmup, self.peak_time)?;
        self.peaks.insert((dtype, threads, backend), peak);
        Ok(peak)
    }

    /// The pool of `threads` measuring threads, or `None` for one thread: a 1-thread figure
    /// is measured on the calling thread, where a 1-thread GEMM runs too.
    fn measuring_pool(&mut self, threads: usize) -> Result<Option<Arc<ThreadPool>>, MeasureError> {
        if threads > 1 {
            self.pool(threads).map(Some)
        } else {
            Ok(None)
        }
    }

    /// The cores' SIMD peak in GOP/s for the instructions the emulator's kernels issue for
    /// `dtype` ([`amx_runtime::peak::simd_peak`], run on each of `threads` threads at once
    /// and summed), measured once and cached; `None` where the emulator's kernel for `dtype`
    /// is the portable one.
    pub fn simd_peak(
        &mut self,
        dtype: PrecisionKind,
        threads: usize,
    ) -> Result<Option<f64>, MeasureError> {
        let threads = thread_count(threads)?;
        if let Some(&p) = self.simd_peaks.get(&(dtype, threads)) {
            return Ok(p);
        }
        let run = || {
            let peak = amx_runtime::peak::simd_peak();
            if dtype.is_integer() {
                peak.int8
            } else if dtype == PrecisionKind::Bf16 {
                peak.bf16
            } else {
                peak.float
            }
            .map(|p| p.gops())
        };
        let per_thread: Vec<Option<f64>> = if threads == 1 {
            vec![run()]
        } else {
            self.pool(threads)?.broadcast(|_| run())
        };
        let total = per_thread.into_iter().sum::<Option<f64>>();
        self.simd_peaks.insert((dtype, threads), total);
        Ok(total)
    }

    /// Read bandwidth in GB/s of a buffer of `bytes` (at least [`MIN_BANDWIDTH_BYTES`]) by
    /// `threads` threads (0: one per core), each reading its own part; the median of 7 passes
    /// after one that faults the pages in. Cached per size and thread count.
    ///
    /// A buffer that cannot be allocated is [`MeasureError::OutOfMemory`] (the check cannot
    /// see memory the system overcommits: ask for what the machine has).
    pub fn bandwidth(&mut self, bytes: usize, threads: usize) -> Result<f64, MeasureError> {
        let threads = thread_count(threads)?;
        let bytes = bytes.max(MIN_BANDWIDTH_BYTES);
        if let Some(&bw) = self.bandwidths.get(&(bytes, threads)) {
            return Ok(bw);
        }
        let pool = if threads > 1 {
            Some(self.pool(threads)?)
        } else {
            None
        };
        let words = bytes / 8;
        let mut buffer: Vec<u64> =
            try_vec(words).map_err(|_| MeasureError::OutOfMemory { bytes })?;
        buffer.extend(0..words as u64);
        // `words * (i + 1)` cannot overflow: the buffer holds `words` u64, and `i < threads`
        // is at most `Gemm::MAX_THREADS`, far below 8.
        let part = |i: usize| &buffer[words * i / threads..words * (i + 1) / threads];
        let pass = || -> f64 {
            let start = Instant::now();
            let sums = match &pool {
                Some(pool) => pool.broadcast(|ctx| read_all(part(ctx.index()))),
                None => vec![read_all(part(0))],
            };
            black_box(sums);
            start.elapsed().as_secs_f64()
        };
        pass();
        let times: Vec<f64> = (0..7).map(|_| pass()).collect();
        let median = Sample::of(&times).map_or(f64::NAN, |s| s.median);
        let bw = (words * 8) as f64 / median / 1e9;
        self.bandwidths.insert((bytes, threads), bw);
        Ok(bw)
    }

    /// Times and checks one case (see the [module docs](self)).
    pub fn run(&mut self, case: &Case) -> Result<Report, MeasureError> {
        by_precision!(case.dtype, |P| self.run_typed::<P>(case))
    }

    /// Times one case on 1 thread and on `case.threads` (0: one per core), their repetitions
    /// alternating in one process, and checks both results against the reference.
    ///
    /// [`Scaling::speedup`] is the median over `case.reps` adjacent pairs of the 1-thread time
    /// over the other's: each pair ran under the same state of the host, where two separate
    /// runs minutes apart may not. Which of the two runs first alternates from pair to pair,
    /// so that neither always follows the other (a second core woken by the previous run, or
    /// left idle by it). The peer is not timed here.
    pub fn scaling(&mut self, case: &Case) -> Result<Scaling, MeasureError> {
        by_precision!(case.dtype, |P| self.scaling_typed::<P>(case))
    }

    fn run_typed<P: Precision>(&mut self, case: &Case) -> Result<Report, MeasureError>
    where
        P::A: Random,
        P::B: Random,
        P::C: Random,
    {
        let Case { m, n, k, .. } = *case;
        let gemm = options(case.threads, case.backend)
            .mode(case.mode)
            .c_stores(case.c_stores);
        let threads = thread_count(case.threads)?;
        let backend = gemm.resolved_backend()?;
        let mut inputs = Inputs::<P>::new(case, threads)?;
        let ops = 2.0 * m as f64 * n as f64 * k as f64;

        let start = Instant::now();
        let packed = PackedB::<P>::pack(&inputs.b, k, n, n)?;
        let pack_s = start.elapsed().as_secs_f64();

        let a = &inputs.a;
        let c = inputs.c.as_mut_slice();
        let (first_run_s, warmup_runs, warmup_s) = warm_up(backend, || {
            gemm.run(m, a, k, &packed, c, n)?;
            Ok(())
        })?;

        // On the silicon, a short sample of the peak loop on the same threads just before each
        // repetition (see `PAIRED_PEAK_TIME`): the pair runs under one state of the host. Not
        // on the emulator or the trap engine, whose roof is the cores' SIMD peak (or, trapped,
        // no roof of the host's state at all) and which do not run at the AMX clock.
        let paired = backend == Backend::Hardware && !amx_trap::is_active();
        let sample_pool = if paired {
            self.measuring_pool(threads)?
        } else {
            None
        };

        // Not `with_capacity(reps)`: `reps` may be anything, and grows only as runs finish.
        let mut times = Vec::new();
        let mut timed_loads = 0;
        // With a peer, its repetitions alternate with ours: each of ours is compared with the
        // peer's right after it, under the same load of the host.
        let mut peer = match &self.peer {
            Some(lib) => {
                lib.set_threads(threads);
                Some(
                    lib.matmul(
                        case.dtype,
                        (m, n, k),
                        scalar_bytes(a),
                        scalar_bytes(&inputs.b),
                    )
                    .and_then(|mut mm| mm.run().map(|()| mm))
                    .map_err(|e| e.to_string()),
                )
            }
            None => None,
        };
        let mut peer_times = Vec::new();
        let mut ratios = Vec::new();
        let mut cpu_times = Vec::new();
        let (mut rep_gops, mut sample_gops) = (Vec::new(), Vec::new());
        for _ in 0..case.reps.max(1) {
            if paired {
                let sample = peak_on(
                    case.dtype,
                    backend,
                    sample_pool.as_deref(),
                    PAIRED_PEAK_WARMUP,
                    PAIRED_PEAK_TIME,
                )?;
                sample_gops.push(sample.gops);
            }
            let cpu_start = crate::timing::process_cpu_s();
            let start = Instant::now();
            let stats = gemm.run(m, a, k, &packed, c, n)?;
            let ours = start.elapsed().as_secs_f64();
            if let (Some(t0), Some(t1)) = (cpu_start, crate::timing::process_cpu_s()) {
                cpu_times.push(t1 - t0);
            }
            times.push(ours);
            if paired {
                rep_gops.push(ops / ours / 1e9);
            }
            timed_loads += stats.loads();
            if let Some(Ok(mm)) = &mut peer {
                let start = Instant::now();
                if let Err(e) = mm.run() {
                    peer = Some(Err(e.to_string()));
                    continue;
                }
                let theirs = start.elapsed().as_secs_f64();
                peer_times.push(theirs);
                ratios.push(theirs / ours);
            }
        }
        let (median_s, min_s) =
            Sample::of(&times).map_or((f64::NAN, f64::NAN), |s| (s.median, s.min));
        let median_cpu_s = Sample::of(&cpu_times).map(|s| s.median);
        // Empty, so `None`, where nothing was paired.
        let paired_peak_gops = Sample::of(&sample_gops).map(|s| s.median);
        let paired_percent_of_peak = paired_percent(&rep_gops, &sample_gops);

        let check = check_run(&gemm, case, &mut inputs, &packed)?;
        let c = inputs.c.as_mut_slice();
        let peer = peer.map(|p| {
            p.map(|mm| {
                let median_s = Sample::of(&peer_times).map_or(f64::NAN, |s| s.median);
                PeerReport {
                    median_s,
                    gops: ops / median_s / 1e9,
                    ratio: Sample::of(&ratios).map_or(f64::NAN, |s| s.median),
                    check: compare_with_peer::<P>(&mm, c, case.mode),
                }
            })
        });
        let gops = ops / median_s / 1e9;
        let peak = self.peak(case.dtype, threads, Some(backend))?;
        let simd_peak_gops = match backend {
            Backend::Hardware => None,
            _ => self.simd_peak(case.dtype, threads)?,
        };
        let b_bytes = inputs.b.len() * case.dtype.input_bytes();
        let bandwidth_gbps = self.bandwidth(b_bytes, threads)?;
        let bandwidth_roofline_gops = if b_bytes == 0 {
            f64::INFINITY
        } else {
            bandwidth_gbps * ops / b_bytes as f64
        };
        Ok(Report {
            case: *case,
            threads,
            backend,
            pack_s,
            median_s,
            min_s,
            median_cpu_s,
            gops,
            peak_gops: peak.gops,
            paired_peak_gops,
            paired_percent_of_peak,
            bandwidth_gbps,
            bandwidth_roofline_gops,
            roofline_gops: peak.gops.min(bandwidth_roofline_gops),
            simd_peak_gops,
            warmup_runs,
            warmup_s,
            first_run_s,
            timed_loads,
            check,
            peer,
        })
    }

    fn scaling_typed<P: Precision>(&mut self, case: &Case) -> Result<Scaling, MeasureError>
    where
        P::A: Random,
        P::B: Random,
        P::C: Random,
    {
        let Case { m, n, k, .. } = *case;
        let one = options(1, case.backend)
            .mode(case.mode)
            .c_stores(case.c_stores);
        let many = options(case.threads, case.backend)
            .mode(case.mode)
            .c_stores(case.c_stores);
        let threads = thread_count(case.threads)?;
        let backend = many.resolved_backend()?;
        // The calling thread's 1-thread runs keep one packed-A block more than the others'.
        let mut inputs = Inputs::<P>::new(case, threads + 1)?;
        let packed = PackedB::<P>::pack(&inputs.b, k, n, n)?;
        let ops = 2.0 * m as f64 * n as f64 * k as f64;

        let a = &inputs.a;
        let c = inputs.c.as_mut_slice();
        for gemm in [&one, &many] {
            warm_up(backend, || {
                gemm.run(m, a, k, &packed, c, n)?;
                Ok(())
            })?;
        }
        let mut time = |gemm: &Gemm| -> Result<f64, MeasureError> {
            let start = Instant::now();
            gemm.run(m, a, k, &packed, c, n)?;
            Ok(start.elapsed().as_secs_f64())
        };
        let (mut one_times, mut many_times) = (Vec::new(), Vec::new());
        for rep in 0..case.reps.max(1) {
            let (t_one, t_many) = if rep % 2 == 0 {
                let t_one = time(&one)?;
                (t_one, time(&many)?)
            } else {
                let t_many = time(&many)?;
                (time(&one)?, t_many)
            };
            one_times.push(t_one);
            many_times.push(t_many);
        }
        let median = |times: &[f64]| Sample::of(times).map_or(f64::NAN, |s| s.median);
        let (one_median_s, median_s) = (median(&one_times), median(&many_times));

        // Both thread counts' results checked; the first failure is the one reported.
        let check = match check_run(&one, case, &mut inputs, &packed)? {
            Ok(_) => check_run(&many, case, &mut inputs, &packed)?,
            Err(why) => Err(format!("on 1 thread: {why}")),
        };
        Ok(Scaling {
            case: *case,
            threads,
            backend,
            one_median_s,
            median_s,
            one_gops: ops / one_median_s / 1e9,
            gops: ops / median_s / 1e9,
            speedup: median_of_ratios(&one_times, &many_times).unwrap_or(f64::NAN),
            check,
        })
    }
}

/// What [`Harness::scaling`] measured for one [`Case`]. Serializes as one flat JSON object,
/// the line `amx-bench --scaling --json` prints.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaling {
    /// The case run (its `threads`: the count compared with 1).
    pub case: Case,
    /// The thread count compared with 1 (`case.threads` resolved).
    pub threads: usize,
    /// Backend the tiles ran on.
    pub backend: Backend,
    /// Median seconds of one multiply on 1 thread.
    pub one_median_s: f64,
    /// Median seconds of one multiply on `threads` threads.
    pub median_s: f64,
    /// `2 m n k / one_median_s`, in 10^9 per second.
    pub one_gops: f64,
    /// `2 m n k / median_s`, in 10^9 per second.
    pub gops: f64,
    /// The median over adjacent pairs of the 1-thread time over the `threads`-thread time
    /// ([`median_of_ratios`]): `threads` at perfect scaling. Not the ratio of the medians,
    /// which mixes repetitions that ran under different states of the host.
    pub speedup: f64,
    /// `Ok(what was compared)` or the mismatch / error, for the 1-thread and the
    /// many-thread result.
    pub check: Result<String, String>,
}

/// The JSON form of a [`Scaling`]; names stable for scripts (`scripts/silicon-check` reads
/// `scaling`). Non-finite figures print as `null`.
#[derive(Serialize)]
struct ScalingRecord<'a> {
    dtype: &'static str,
    m: usize,
    n: usize,
    k: usize,
    threads: usize,
    backend: String,
    mode: &'static str,
    c_stores: &'static str,
    reps: usize,
    one_thread_median_s: f64,
    median_s: f64,
    one_thread_gops: f64,
    gops: f64,
    scaling: f64,
    check: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    check_detail: Option<&'a str>,
}

impl Serialize for Scaling {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let c = &self.case;
        let (check, check_detail) = check_fields(&self.check);
        ScalingRecord {
            dtype: c.dtype.name(),
            m: c.m,
            n: c.n,
            k: c.k,
            threads: self.threads,
            backend: self.backend.to_string(),
            mode: mode_name(c.mode),
            c_stores: c_stores_name(c.c_stores),
            reps: c.reps,
            one_thread_median_s: self.one_median_s,
            median_s: self.median_s,
            one_thread_gops: self.one_gops,
            gops: self.gops,
            scaling: self.speedup,
            check,
            check_detail,
        }
        .serialize(serializer)
    }
}

/// The JSON name of a mode.
fn c_stores_name(c_stores: CStores) -> &'static str {
    match c_stores {
        CStores::Cached => "cached",
        CStores::Streaming => "streaming",
        CStores::Auto => "auto",
        _ => "other",
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Overwrite => "overwrite",
        Mode::Accumulate => "accumulate",
    }
}

/// A case's inputs: A, B, the starting C, and the 64-byte-aligned C the runs write.
struct Inputs<P: Precision> {
    a: Vec<P::A>,
    b: Vec<P::B>,
    c0: Vec<P::C>,
    // C 64-byte aligned, as a program tuned for the silicon keeps it (and as oneDNN allocates
    // its own): a tile row of C that straddles two cache lines makes every C load and store of
    // the micro-kernel touch twice the lines (about 12% of a 1024^3 product).
    c: AlignedScalars<P::C>,
}

impl<P: Precision> Inputs<P>
where
    P::A: Random,
    P::B: Random,
    P::C: Random,
{
    /// Random inputs for `case`: sizes checked, then the run's footprint with `workers` GEMM
    /// workers ([`Case::footprint`]) checked against the memory available, before anything
    /// is allocated; every allocation fallible.
    fn new(case: &Case, workers: usize) -> Result<Self, MeasureError> {
        let Case { m, n, k, .. } = *case;
        let elements = |rows: usize, cols: usize, operand| {
            rows.checked_mul(cols)
                .ok_or(MeasureError::TooLarge { operand })
        };
        let (a_len, b_len, c_len) = (
            elements(m, k, Operand::A)?,
            elements(k, n, Operand::B)?,
            elements(m, n, Operand::C)?,
        );
        check_footprint(case.footprint_with(workers)?, available_memory())?;
        let a: Vec<P::A> = try_random(a_len, 1)?;
        let b: Vec<P::B> = try_random(b_len, 2)?;
        let c0: Vec<P::C> = match case.mode {
            Mode::Overwrite => {
                let mut c0 = try_vec(c_len)?;
                c0.resize(c_len, P::C::default());
                c0
            }
            Mode::Accumulate => try_random(c_len, 3)?,
        };
        let mut c = AlignedScalars::<P::C>::zeroed(c_len)?;
        c.as_mut_slice().copy_from_slice(&c0);
        Ok(Inputs { a, b, c0, c })
    }
}

/// Runs `run` until warm: the first run pays thread start, configuration loads and the
/// first-use trap; on the silicon it keeps going until the unit is awake and the clock has
/// settled (at least 3 runs and 50 ms, at most 1 000 runs). Returns the first run's seconds,
/// the runs and their seconds.
fn warm_up(
    backend: Backend,
    mut run: impl FnMut() -> Result<(), MeasureError>,
) -> Result<(f64, usize, f64), MeasureError> {
    let start = Instant::now();
    run()?;
    let first_run_s = start.elapsed().as_secs_f64();
    let (min_runs, min_time) = match backend {
        Backend::Hardware => (3, 0.05),
        _ => (1, 0.0),
    };
    let mut runs = 1;
    while runs < min_runs || start.elapsed().as_secs_f64() < min_time {
        if runs >= 1000 {
            break;
        }
        run()?;
        runs += 1;
    }
    Ok((first_run_s, runs, start.elapsed().as_secs_f64()))
}

/// The check: one more run of `gemm` from the starting C, compared with
/// `amx_gemm::reference` (every output of a product up to 2^27 multiply-adds, else 4 096 of
/// them). The result stays in `inputs.c`.
fn check_run<P: Precision>(
    gemm: &Gemm,
    case: &Case,
    inputs: &mut Inputs<P>,
    packed: &PackedB<P>,
) -> Result<Result<String, String>, MeasureError> {
    let Case { m, n, k, .. } = *case;
    let c = inputs.c.as_mut_slice();
    c.copy_from_slice(&inputs.c0);
    gemm.run(m, &inputs.a, k, packed, c, n)?;
    let sample = if (m as u128) * (n as u128) * (k as u128) <= 1 << 27 {
        Outputs::All
    } else {
        Outputs::Sampled(4096)
    };
    let start_c = (case.mode == Mode::Accumulate).then_some(&inputs.c0[..]);
    Ok(
        reference::verify::<P>(m, n, k, &inputs.a, k, &inputs.b, n, start_c, c, n, sample)
            .map(|v| match P::KIND {
                kind if kind.is_fp8() => format!("within the FP8 bound, {v}"),
                kind if !kind.is_integer() => format!("within the bf16 bound, {v}"),
                _ => format!("exact, {v}"),
            })
            .map_err(|e| e.to_string()),
    )
}

/// A zeroed, 64-byte-aligned buffer of `len` GEMM elements.
struct AlignedScalars<T> {
    lines: Vec<Line>,
    len: usize,
    _elements: std::marker::PhantomData<T>,
}

/// 64 bytes aligned to 64.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

impl<T: amx_gemm::Scalar> AlignedScalars<T> {
    fn zeroed(len: usize) -> Result<Self, MeasureError> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(MeasureError::TooLarge {
                operand: Operand::C,
            })?;
        let mut lines: Vec<Line> = try_vec(bytes.div_ceil(64))?;
        lines.resize(bytes.div_ceil(64), Line([0; 64]));
        Ok(AlignedScalars {
            lines,
            len,
            _elements: std::marker::PhantomData,
        })
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: `lines` holds at least `len * size_of::<T>()` zeroed bytes, 64-byte aligned
        // (at least T's alignment); `Scalar` is sealed, its implementors (i8, u8, Bf8, Hf8,
        // i32, f32, bf16, f16) are plain values for which zero bytes are a value; the slice borrows `self`
        // mutably.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), self.len) }
    }
}

/// The bytes of a slice of GEMM elements, as the peer takes them.
fn scalar_bytes<T: amx_gemm::Scalar>(data: &[T]) -> &[u8] {
    // SAFETY: `Scalar` is sealed; its implementors (i8, u8, Bf8, Hf8, i32, f32, bf16, f16) are
    // plain values
    // of their size, without padding, so the slice's memory is `size_of_val` initialized bytes,
    // borrowed for the slice's lifetime.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast(), std::mem::size_of_val(data)) }
}

/// oneDNN's C against ours: the integer products are exact in both, so they must agree bit
/// for bit (C overwritten; accumulating runs start from a C the peer never saw); bf16 and fp16
/// sums are rounded in another order, which the reference check bounds instead.
fn compare_with_peer<P: Precision>(
    mm: &crate::onednn::Matmul<'_>,
    c: &[P::C],
    mode: Mode,
) -> Result<String, String> {
    if !P::KIND.is_integer() || mode == Mode::Accumulate {
        return Ok("not compared (floating-point rounding order, or C accumulated)".to_owned());
    }
    let theirs = mm.c().map_err(|e| e.to_string())?;
    let ours = scalar_bytes(c);
    if theirs == ours {
        Ok(format!("identical, {} outputs", c.len()))
    } else {
        let differ = theirs
            .chunks_exact(4)
            .zip(ours.chunks_exact(4))
            .filter(|(x, y)| x != y)
            .count();
        Err(format!(
            "{differ} of {} outputs differ from oneDNN's",
            c.len()
        ))
    }
}

fn options(threads: usize, backend: Option<Backend>) -> Gemm {
    let gemm = Gemm::new().threads(threads);
    match backend {
        Some(b) => gemm.backend(b),
        None => gemm,
    }
}

/// Sums a slice so that the compiler cannot skip the reads; vectorized with AVX2 where the CPU
/// has it.
fn read_all(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { read_all_avx2(words) };
    }
    read_all_generic(words)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn read_all_avx2(words: &[u64]) -> u64 {
    read_all_generic(words)
}

#[inline(always)]
fn read_all_generic(words: &[u64]) -> u64 {
    let mut acc = [0u64; 16];
    let mut chunks = words.chunks_exact(16);
    for chunk in &mut chunks {
        for (a, w) in acc.iter_mut().zip(chunk) {
            *a = a.wrapping_add(*w);
        }
    }
    let tail: u64 = chunks.remainder().iter().fold(0, |s, w| s.wrapping_add(*w));
    acc.iter().fold(tail, |s, a| s.wrapping_add(*a))
}

/// The peak loop's layouts: the GEMM's 2x2 register tile (four C tiles, two A, two B), one
/// per precision, as a user of `amx-runtime` declares it.
mod layouts {
    use amx_runtime::tilecfg;

    tilecfg! {
        /// TDPBSSD: i8 x i8 into i32.
        pub(super) struct Int8Peak;
        palette 1;
        t0 as c00: 16x16 i32;
        t1 as c01: 16x16 i32;
        t2 as c10: 16x16 i32;
        t3 as c11: 16x16 i32;
        t4 as a0: 16x64 i8;
        t5 as a1: 16x64 i8;
        t6 as b0: 16x64 i8;
        t7 as b1: 16x64 i8;
    }

    tilecfg! {
        /// TDPBUSD: u8 x i8 into i32.
        pub(super) struct U8S8Peak;
        palette 1;
        t0 as c00: 16x16 i32;
        t1 as c01: 16x16 i32;
        t2 as c10: 16x16 i32;
        t3 as c11: 16x16 i32;
        t4 as a0: 16x64 u8;
        t5 as a1: 16x64 u8;
        t6 as b0: 16x64 i8;
        t7 as b1: 16x64 i8;
    }

    tilecfg! {
        /// TDPBF16PS: bf16 x bf16 into f32.
        pub(super) struct Bf16Peak;
        palette 1;
        t0 as c00: 16x16 f32;
        t1 as c01: 16x16 f32;
        t2 as c10: 16x16 f32;
        t3 as c11: 16x16 f32;
        t4 as a0: 16x32 bf16;
        t5 as a1: 16x32 bf16;
        t6 as b0: 16x32 bf16;
        t7 as b1: 16x32 bf16;
    }

    tilecfg! {
        /// TDPBF8PS: bf8 x bf8 into f32.
        pub(super) struct Bf8Peak;
        palette 1;
        t0 as c00: 16x16 f32;
        t1 as c01: 16x16 f32;
        t2 as c10: 16x16 f32;
        t3 as c11: 16x16 f32;
        t4 as a0: 16x64 bf8;
        t5 as a1: 16x64 bf8;
        t6 as b0: 16x64 bf8;
        t7 as b1: 16x64 bf8;
    }

    tilecfg! {
        /// TDPHF8PS: hf8 x hf8 into f32.
        pub(super) struct Hf8Peak;
        palette 1;
        t0 as c00: 16x16 f32;
        t1 as c01: 16x16 f32;
        t2 as c10: 16x16 f32;
        t3 as c11: 16x16 f32;
        t4 as a0: 16x64 hf8;
        t5 as a1: 16x64 hf8;
        t6 as b0: 16x64 hf8;
        t7 as b1: 16x64 hf8;
    }
}

/// A peak loop's dot product as a `Result`: `()` for the instructions every AMX unit with
/// their feature runs once configured, the unit's answer for those it may refuse (AMX-FP8).
trait Issued {
    fn issued(self) -> Result<(), amx_runtime::Fault>;
}

impl Issued for () {
    #[inline(always)]
    fn issued(self) -> Result<(), amx_runtime::Fault> {
        Ok(())
    }
}

impl Issued for Result<(), amx_runtime::Fault> {
    #[inline(always)]
    fn issued(self) -> Result<(), amx_runtime::Fault> {
        self
    }
}

/// One thread's peak loop for one layout: ops per second and the warm-up time. The operands
/// are random data like the GEMM's own (the emulator's speed depends on the data: bf16
/// denormals take its slow path, so a peak measured on other data would not be a roof).
macro_rules! peak_loop {
    ($name:ident, $layout:ident, $dot:ident, $a:ty, $b:ty) => {
        fn $name(
            backend: Backend,
            warmup: Duration,
            time: Duration,
            ops_per_tdp: u64,
        ) -> Result<(f64, f64), MeasureError> {
            use layouts::$layout as L;
            // Two tiles of A and two of B, 16 rows of 64 bytes each; allocated before the
            // configuration, as a kernel does.
            let row = ROW_BYTES / std::mem::size_of::<$a>();
            let a: Vec<$a> = try_random(2 * 16 * row, 7)?;
            let b: Vec<$b> = try_random(2 * 16 * row, 8)?;
            let tile = 16 * row;
            let mut tiles = configure_typed_on::<L>(backend).map_err(GemmError::from)?;
            let mut load = || -> Result<(), amx_runtime::Fault> {
                tiles.load(L::a0, &a[..tile], row)?;
                tiles.load(L::a1, &a[tile..], row)?;
                tiles.load(L::b0, &b[..tile], row)?;
                tiles.load(L::b1, &b[tile..], row)?;
                Ok(())
            };
            load().map_err(GemmError::from)?;
            tiles.zero(L::c00);
            tiles.zero(L::c01);
            tiles.zero(L::c10);
            tiles.zero(L::c11);
            let mut round = |n: u64| -> Result<(), GemmError> {
                for _ in 0..n {
                    tiles.$dot(L::c00, L::a0, L::b0).issued()?;
                    tiles.$dot(L::c01, L::a0, L::b1).issued()?;
                    tiles.$dot(L::c10, L::a1, L::b0).issued()?;
                    tiles.$dot(L::c11, L::a1, L::b1).issued()?;
                }
                Ok(())
            };
            let start = Instant::now();
            let mut batch = 1u64;
            while start.elapsed() < warmup {
                round(batch)?;
                batch = (batch * 2).min(4096);
            }
            let warm = start.elapsed().as_secs_f64();
            // Batches of about 1 ms between clock reads.
            let mut rounds = 0u64;
            let start = Instant::now();
            while start.elapsed() < time {
                round(batch)?;
                rounds += batch;
            }
            let secs = start.elapsed().as_secs_f64();
            drop(tiles);
            // A measuring thread keeps no tile state (the OS would save and restore it on
            // every switch); a failure here changes no figure, so it is not reported.
            let _ = amx_runtime::release_on(backend);
            let ops_done = rounds as f64 * 4.0 * ops_per_tdp as f64;
            Ok((ops_done / secs, warm))
        }
    };
}

peak_loop!(peak_int8, Int8Peak, tdpbssd, i8, i8);
peak_loop!(peak_u8s8, U8S8Peak, tdpbusd, u8, i8);
peak_loop!(peak_bf16, Bf16Peak, tdpbf16ps, bf16, bf16);
peak_loop!(peak_bf8, Bf8Peak, tdpbf8ps, Bf8, Bf8);
peak_loop!(peak_hf8, Hf8Peak, tdphf8ps, Hf8, Hf8);

/// The peak loop for `dtype` on `backend`, on every thread of `pool` at once (on the calling
/// thread without one), `warmup` then `time` long: the threads' rates summed, uncached.
fn peak_on(
    dtype: PrecisionKind,
    backend: Backend,
    pool: Option<&ThreadPool>,
    warmup: Duration,
    time: Duration,
) -> Result<Peak, MeasureError> {
    let run = || peak_worker(dtype, backend, warmup, time);
    let results: Vec<Result<(f64, f64), MeasureError>> = match pool {
        Some(pool) => pool.broadcast(|_| run()),
        None => vec![run()],
    };
    let mut peak = Peak {
        gops: 0.0,
        threads: results.len(),
        warmup_s: 0.0,
    };
    for r in results {
        let (ops_per_s, warm) = r?;
        peak.gops += ops_per_s / 1e9;
        peak.warmup_s = peak.warmup_s.max(warm);
    }
    Ok(peak)
}

/// One thread's peak loop: ops per second and the warm-up time.
fn peak_worker(
    dtype: PrecisionKind,
    backend: Backend,
    warmup: Duration,
    time: Duration,
) -> Result<(f64, f64), MeasureError> {
    let ops = dtype.ops_per_tdp();
    if backend == Backend::Hardware {
        // The peer (oneDNN) may have run on this thread since the last sample, loading or
        // releasing tiles behind the runtime's tracking: the typed loop's configure must see the
        // real configuration, else it skips its LDTILECFG and runs on released tiles (#UD).
        if let Ok(mut hw) = amx_runtime::Hardware::new() {
            hw.resync();
        }
    }
    match dtype {
        PrecisionKind::Int8 => peak_int8(backend, warmup, time, ops),
        PrecisionKind::U8S8 => peak_u8s8(backend, warmup, time, ops),
        PrecisionKind::Bf16 => peak_bf16(backend, warmup, time, ops),
        // The other int8 instructions and TDPFP16PS run at the rates of the loops above on the
        // silicon: their peak is those loops'.
        PrecisionKind::S8U8 | PrecisionKind::U8U8 => peak_int8(backend, warmup, time, ops),
        PrecisionKind::Fp16 => peak_bf16(backend, warmup, time, ops),
        PrecisionKind::Bf8Bf8 => peak_bf8(backend, warmup, time, ops),
        PrecisionKind::Hf8Hf8 => peak_hf8(backend, warmup, time, ops),
        // The mixed FP8 products have no loop of their own: the hf8 loop stands in for them.
        PrecisionKind::Bf8Hf8 | PrecisionKind::Hf8Bf8 => peak_hf8(backend, warmup, time, ops),
        other => Err(MeasureError::UnsupportedPrecision(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Foreign AMX code (a peer such as oneDNN) between two peak samples on the thread may
    /// release the configuration the runtime tracks as loaded: the next sample loads its own.
    #[test]
    fn a_peak_sample_after_foreign_amx_code_configures_again() {
        if amx_trap::hardware().is_err() {
            amx_test_support::skip(
                amx_test_support::Kind::Hardware,
                "needs the AMX silicon or the trap engine (x86-64 Linux)",
            );
            return;
        }
        let (warmup, time) = (Duration::from_micros(100), Duration::from_micros(300));
        // The peak's own layout tracked as loaded on this thread...
        drop(configure_typed_on::<layouts::Int8Peak>(Backend::Hardware).unwrap());
        // ...then released behind the tracking's back, as a foreign library does.
        // SAFETY: TILERELEASE is legal in any state.
        unsafe { amx_runtime::intrinsics::_tile_release() };
        let (ops, _) = peak_worker(PrecisionKind::Int8, Backend::Hardware, warmup, time).unwrap();
        assert!(ops > 0.0);
    }

    #[test]
    fn footprint_is_checked_against_available_memory() {
        assert_eq!(check_footprint(u128::MAX, None), Ok(()));
        assert_eq!(check_footprint(100, Some(100)), Ok(()));
        assert_eq!(
            check_footprint(101, Some(100)),
            Err(MeasureError::InsufficientMemory {
                needed: 101,
                available: 100
            })
        );
        assert_eq!(
            check_footprint(u128::MAX, Some(7)),
            Err(MeasureError::InsufficientMemory {
                needed: u64::MAX,
                available: 7
            })
        );
        let text = check_footprint(3 << 30, Some(1 << 30))
            .unwrap_err()
            .to_string();
        assert_eq!(
            text,
            "the run needs 3.0 GiB of buffers; the system has 1.0 GiB available"
        );
        if cfg!(target_os = "linux") {
            assert!(available_memory().is_some_and(|b| b > 0));
        }
    }

    #[test]
    fn ratios_are_paired_then_the_median_taken() {
        // Per pair 2, 0.5, 4: the median of the ratios is 2, unlike the ratio of the medians
        // (2 / 2 = 1), which pairs a repetition with another's sample.
        assert_eq!(
            median_of_ratios(&[2.0, 1.0, 4.0], &[1.0, 2.0, 1.0]),
            Some(2.0)
        );
        // An even count: the mean of the two middle ratios.
        assert_eq!(
            median_of_ratios(&[1.0, 2.0, 3.0, 4.0], &[1.0, 1.0, 1.0, 1.0]),
            Some(2.5)
        );
        // Unmatched values are ignored; zero or non-finite denominators drop their pair.
        assert_eq!(median_of_ratios(&[3.0, 9.0, 5.0], &[1.0]), Some(3.0));
        assert_eq!(
            median_of_ratios(&[1.0, 6.0, 7.0], &[0.0, 2.0, f64::NAN]),
            Some(3.0)
        );
        assert_eq!(median_of_ratios(&[1.0], &[0.0]), None);
        assert_eq!(median_of_ratios(&[], &[]), None);
    }

    #[test]
    fn the_paired_percent_follows_the_host() {
        // The host slows to half its speed for the last two repetitions: the GEMM and its
        // samples halve together, and the paired share stays at 60%.
        let gemm = [600.0, 600.0, 300.0, 300.0, 600.0];
        let samples = [1000.0, 1000.0, 500.0, 500.0, 1000.0];
        let share = paired_percent(&gemm, &samples).unwrap();
        assert!((share - 60.0).abs() < 1e-12, "{share}");
        assert_eq!(paired_percent(&[], &[]), None);
    }

    #[test]
    fn scaling_alternates_and_checks_on_the_emulator() {
        let mut harness = Harness::new();
        let case = Case {
            dtype: PrecisionKind::Int8,
            m: 33,
            n: 40,
            k: 70,
            threads: 2,
            reps: 3,
            backend: Some(Backend::Emulated),
            mode: Mode::Overwrite,
            c_stores: CStores::Auto,
        };
        let s = harness.scaling(&case).unwrap();
        assert_eq!((s.threads, s.backend), (2, Backend::Emulated));
        assert!(s.check.is_ok(), "{:?}", s.check);
        // Nothing about the speed: only that the figures exist.
        assert!(s.speedup.is_finite() && s.speedup > 0.0, "{s:?}");
        let json: serde_json::Value = serde_json::to_value(&s).unwrap();
        assert_eq!(json["threads"], 2);
        assert_eq!(json["check"], "ok");
        assert!(json["scaling"].as_f64().is_some());
        assert!(json["one_thread_median_s"].as_f64().is_some());

        // Hostile sizes: refused before anything is allocated, never a panic.
        let h = usize::MAX / 2;
        for (m, n, k) in [(h, h, 3), (3, h, h), (h, 3, h), (h, h, h)] {
            let huge = Case { m, n, k, ..case };
            assert!(matches!(
                harness.scaling(&huge),
                Err(MeasureError::TooLarge { .. } | MeasureError::InsufficientMemory { .. })
            ));
            // An error or a bound, whichever: only not a panic.
            let _ = huge.footprint();
        }
    }

    #[test]
    fn read_all_sums() {
        let v: Vec<u64> = (0..1000).collect();
        assert_eq!(read_all(&v), 999 * 1000 / 2);
    }

    #[test]
    fn the_peak_runs_on_every_precision() {
        let mut harness = Harness::new();
        harness.peak_time = Duration::from_millis(5);
        for dtype in PrecisionKind::ALL {
            let peak = harness.peak(dtype, 1, Some(Backend::Emulated)).unwrap();
            assert!(
                peak.gops > 0.0 && peak.gops.is_finite(),
                "{dtype}: {peak:?}"
            );
            assert_eq!(peak.threads, 1);
        }
        let two = harness
            .peak(PrecisionKind::Int8, 2, Some(Backend::Emulated))
            .unwrap();
        assert_eq!(two.threads, 2);
    }

    #[test]
    fn the_report_serializes_flat() {
        let mut harness = Harness::new();
        harness.peak_time = Duration::from_millis(1);
        let case = Case {
            dtype: PrecisionKind::U8S8,
            m: 3,
            n: 5,
            k: 7,
            threads: 1,
            reps: 2,
            backend: Some(Backend::Emulated),
            mode: Mode::Accumulate,
            c_stores: CStores::Auto,
        };
        let report = harness.run(&case).unwrap();
        let json: serde_json::Value = serde_json::to_value(&report).unwrap();
        assert_eq!(json["dtype"], "u8s8");
        assert_eq!((json["m"].as_u64(), json["k"].as_u64()), (Some(3), Some(7)));
        assert_eq!(json["backend"], "emulated");
        assert_eq!(json["mode"], "accumulate");
        assert_eq!(json["check"], "ok");
        assert!(json["check_detail"].as_str().unwrap().starts_with("exact"));
        assert!(json["gops"].as_f64().unwrap() > 0.0);
        // Paired peak samples only on the silicon.
        assert!(json.get("paired_percent_of_peak").is_none(), "{json}");
        assert!(json.get("paired_peak_gops").is_none(), "{json}");
        assert!(json["percent_of_peak"].as_f64().is_some());
        // A tiny B is far below the bandwidth roof's buffer, so the peak bounds it.
        assert_eq!(json["b_bound"], false);
        // On the emulator with a vector kernel, both SIMD shares; the fastest repetition's is
        // at least the median's.
        if let (Some(median), Some(best)) = (
            json["percent_of_simd_peak"].as_f64(),
            json["best_percent_of_simd_peak"].as_f64(),
        ) {
            assert!(best >= median, "best {best} < median {median}");
        } else {
            assert!(
                json.get("simd_peak_gops").is_none(),
                "a share is missing: {json}"
            );
        }
    }
}
