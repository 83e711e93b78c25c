//! Measuring the host and this crate: the tile unit's peak, the memory bandwidth, and timed,
//! checked GEMM runs. The `gemm` example and the benchmark are thin layers over this module.
//!
//! - [`Harness::peak`]: a register-only loop of tile dot products (4 independent C tiles, A and
//!   B loaded once, no memory traffic), after a warm-up, on every worker thread at once. This is
//!   the compute roof: it includes the clock the CPU runs at under AMX load.
//! - [`Harness::bandwidth`]: read GB/s of a buffer larger than L2 (at least the size of B),
//!   each thread reading its own part, after a first pass that faults the pages in.
//! - [`Harness::run`]: random inputs, B packed (timed separately), warm-up (the silicon wakes
//!   its AMX unit in ~2.8 us after 5 us idle and the first tile instruction of a thread traps
//!   once), then the median of timed repetitions, and a check against [`reference`](mod@crate::reference).
//!   A shape whose buffers together exceed the memory the OS reports available is refused
//!   before anything is allocated ([`GemmError::InsufficientMemory`]).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use amx_runtime::{configure_on, Backend};

use crate::configs::{self, MicroShape, A0, A1, B0, B1, C00, C01, C10, C11};
use crate::error::{GemmError, Operand};
use crate::gemm::{Gemm, Mode};
use crate::pack::{AlignedBytes, PackedB, STEP, TILE};
use crate::pool;
use crate::precision::{Bf16, DType, Element, Int8, Precision, ROW_BYTES, U8S8};
use crate::reference::{self, Sample};
use crate::tile_ops::{Checked, Mem, TileOps};

/// One step of the SplitMix64 generator: a fast, seedable source of test data.
pub fn splitmix(state: u64) -> u64 {
    let mut z = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `len` random elements from `seed`: integers over their whole range (i32: within
/// `+-2^20`), floating point uniform in `[-1, 1)` rounded to the type (no denormals).
///
/// Allocates like `Vec::with_capacity(len)` (a `len` too large to allocate aborts); the
/// [`Harness`] uses a fallible version.
pub fn random<T: Element>(len: usize, seed: u64) -> Vec<T> {
    let probe = T::from_f64(0.5).to_f64();
    let is_float = probe == 0.5;
    let range = T::from_f64(1e9).to_f64();
    let low = T::from_f64(-1e9).to_f64();
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = splitmix(state);
            let unit = (state >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
            if is_float {
                T::from_f64(2.0 * unit - 1.0)
            } else if range > 1e6 {
                T::from_f64((unit * 2.0 - 1.0) * f64::from(1 << 20))
            } else {
                T::from_f64((low + unit * (range - low + 1.0)).floor())
            }
        })
        .collect()
}

/// [`random`], or [`GemmError::OutOfMemory`] when `len` elements cannot be allocated.
fn try_random<T: Element>(len: usize, seed: u64) -> Result<Vec<T>, GemmError> {
    let mut out = try_vec(len)?;
    out.extend(random::<T>(len, seed));
    Ok(out)
}

/// An empty vector with room for `len` elements, or [`GemmError::OutOfMemory`].
fn try_vec<T>(len: usize) -> Result<Vec<T>, GemmError> {
    let mut out = Vec::new();
    out.try_reserve_exact(len)
        .map_err(|_| GemmError::OutOfMemory {
            bytes: len.saturating_mul(std::mem::size_of::<T>()),
        })?;
    Ok(out)
}

/// Bytes of memory the OS can hand out without swapping (`MemAvailable` of `/proc/meminfo`),
/// or `None` where that is not known.
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// [`GemmError::InsufficientMemory`] when `needed` bytes exceed what the OS reports available.
/// `try_reserve` cannot see this: Linux overcommits, so a too-large run would be killed by the
/// OOM killer while its inputs are filled, minutes later, instead of failing here.
fn check_footprint(needed: u128, available: Option<u64>) -> Result<(), GemmError> {
    match available {
        Some(available) if needed > u128::from(available) => Err(GemmError::InsufficientMemory {
            needed: u64::try_from(needed).unwrap_or(u64::MAX),
            available,
        }),
        _ => Ok(()),
    }
}

/// The compute roof of the tile unit, measured.
#[derive(Clone, Copy, Debug, PartialEq)]
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
    pub dtype: DType,
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
}

impl Case {
    /// An upper bound of the bytes [`Harness::run`] allocates for this case (on top of what
    /// the process already holds): A and B, packed B, C twice (the starting values and the
    /// result), the reference check's `f64` copy of B and its per-row work, the bandwidth
    /// buffer, every worker's packed-A block, and a margin for the small rest (thread pools,
    /// the peak loop's operands, the report). `Harness::run` refuses a case whose bound exceeds
    /// the memory available before it allocates anything.
    ///
    /// # Errors
    /// [`GemmError::TooLarge`] when a buffer's size overflows, [`GemmError::TooManyThreads`]
    /// for a thread count a GEMM refuses.
    pub fn footprint(&self) -> Result<u128, GemmError> {
        match self.dtype {
            DType::Int8 => self.footprint_of::<Int8>(),
            DType::U8S8 => self.footprint_of::<U8S8>(),
            DType::Bf16 => self.footprint_of::<Bf16>(),
        }
    }

    fn footprint_of<P: Precision>(&self) -> Result<u128, GemmError> {
        use std::mem::size_of;
        let Case { m, n, k, .. } = *self;
        let threads = options(self.threads, self.backend).checked_thread_count()?;
        // Every product of two `usize` fits u128; sums of a few of them too. Three factors
        // could not, so each is checked.
        let bytes = |elements: u128, size: usize, operand| {
            elements
                .checked_mul(size as u128)
                .ok_or(GemmError::TooLarge { operand })
        };
        let (m, n, k) = (m as u128, n as u128, k as u128);
        let a = bytes(m * k, size_of::<P::A>(), Operand::A)?;
        let b = bytes(k * n, size_of::<P::B>(), Operand::B)?;
        let packed = PackedB::<P>::bytes_for(self.k, self.n)? as u128;
        let c = bytes(m * n, size_of::<P::C>(), Operand::C)?;
        // The reference: B widened to f64, and per checked row its results and magnitudes,
        // the list of columns and the rows' column lists (`reference::verify`).
        let check = bytes(k * n, size_of::<f64>(), Operand::B)? + 32 * (m + n) + (64 << 10);
        let bandwidth = (b.max(MIN_BANDWIDTH_BYTES as u128) / 8) * 8;
        // Each worker's packed-A block: at most `mc` rows of `kc` k-steps for its full
        // micro-rows, and 32 rows of all of K for a last micro-row of its own (`gemm::work`).
        let blocking = crate::blocking::Blocking::DEFAULT.normalized();
        let steps = crate::pack::steps_for(P::DTYPE, self.k) as u128;
        let rows = m.min(blocking.mc as u128);
        let per_worker = (rows * steps.min(blocking.kc_steps as u128) + MR_ROWS * steps)
            .checked_mul(ROW_BYTES as u128)
            .ok_or(GemmError::TooLarge {
                operand: Operand::A,
            })?;
        let scratch = per_worker * threads as u128;
        Ok(a + b + packed + 2 * c + check + bandwidth + scratch + MARGIN)
    }
}

/// Rows of one packed A micro-panel.
const MR_ROWS: u128 = crate::pack::MR as u128;

/// What a run allocates besides its buffers (pools, the peak loop's operands, the report).
const MARGIN: u128 = 4 << 20;

/// What [`Harness::run`] measured for one [`Case`].
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
    /// `2 m n k / median_s`, in 10^9 per second.
    pub gops: f64,
    /// The measured compute roof for this precision, backend and thread count.
    pub peak_gops: f64,
    /// Read bandwidth of a buffer the size of B (at least 8 MiB), GB/s.
    pub bandwidth_gbps: f64,
    /// `bandwidth x (2 m n k) / bytes of B`: the rate if reading B once were the limit.
    pub bandwidth_roofline_gops: f64,
    /// The lesser of the compute peak and the bandwidth roofline.
    pub roofline_gops: f64,
    /// Multiplies run before timing.
    pub warmup_runs: usize,
    /// Seconds they took.
    pub warmup_s: f64,
    /// Seconds of the very first multiply (thread start, configuration loads, first-use trap).
    pub first_run_s: f64,
    /// LDTILECFGs issued by the timed runs, all together (0 when every worker already held its
    /// configurations).
    pub timed_loads: u64,
    /// `Ok(what was compared)` or the mismatch / error.
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

    /// The report as one JSON object on one line.
    pub fn to_json(&self) -> String {
        let c = &self.case;
        let mut s = String::from("{");
        let mut field = |name: &str, value: String| {
            if s.len() > 1 {
                s.push(',');
            }
            let _ = write!(s, "\"{name}\":{value}");
        };
        field("dtype", json_string(c.dtype.name()));
        field("m", c.m.to_string());
        field("n", c.n.to_string());
        field("k", c.k.to_string());
        field("threads", self.threads.to_string());
        field("backend", json_string(&self.backend.to_string()));
        let mode = match c.mode {
            Mode::Overwrite => "overwrite",
            Mode::Accumulate => "accumulate",
        };
        field("mode", json_string(mode));
        field("reps", c.reps.to_string());
        field("median_s", json_number(self.median_s));
        field("min_s", json_number(self.min_s));
        field("gops", json_number(self.gops));
        field("peak_gops", json_number(self.peak_gops));
        field("bandwidth_gbps", json_number(self.bandwidth_gbps));
        field(
            "bandwidth_roofline_gops",
            json_number(self.bandwidth_roofline_gops),
        );
        field("roofline_gops", json_number(self.roofline_gops));
        field("percent_of_peak", json_number(self.percent_of_peak()));
        field(
            "percent_of_roofline",
            json_number(self.percent_of_roofline()),
        );
        field("b_bound", self.b_bound().to_string());
        field("pack_s", json_number(self.pack_s));
        field("warmup_runs", self.warmup_runs.to_string());
        field("warmup_s", json_number(self.warmup_s));
        field("first_run_s", json_number(self.first_run_s));
        field("timed_tile_config_loads", self.timed_loads.to_string());
        match &self.check {
            Ok(what) => {
                field("check", json_string("ok"));
                field("check_detail", json_string(what));
            }
            Err(why) => field("check", json_string(why)),
        }
        s.push('}');
        s
    }
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_number(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.6e}")
    } else {
        "null".to_owned()
    }
}

/// Measures and caches the host's roofs, and times GEMM cases against them.
#[derive(Debug)]
pub struct Harness {
    peaks: HashMap<(DType, usize, Backend), Peak>,
    bandwidths: HashMap<(usize, usize), f64>,
    /// How long the peak loop runs after its warm-up, per measurement.
    pub peak_time: Duration,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}

/// Buffers smaller than this are not used for the bandwidth roof: it must exceed the L2 of
/// every core (2 MiB each here).
pub const MIN_BANDWIDTH_BYTES: usize = 8 << 20;

impl Harness {
    /// A harness with nothing measured yet.
    pub fn new() -> Harness {
        Harness {
            peaks: HashMap::new(),
            bandwidths: HashMap::new(),
            peak_time: Duration::from_millis(200),
        }
    }

    /// The tile unit's peak for `dtype` on `threads` threads (0: one per core) and `backend`
    /// (`None`: the process's), measured once and cached.
    pub fn peak(
        &mut self,
        dtype: DType,
        threads: usize,
        backend: Option<Backend>,
    ) -> Result<Peak, GemmError> {
        let gemm = options(threads, backend);
        let (threads, backend) = (gemm.checked_thread_count()?, gemm.resolved_backend()?);
        if let Some(p) = self.peaks.get(&(dtype, threads, backend)) {
            return Ok(*p);
        }
        let time = self.peak_time;
        let warmup = match backend {
            Backend::Hardware => Duration::from_millis(50),
            Backend::Emulated => Duration::from_millis(10),
        };
        let run = || peak_worker(dtype, backend, warmup, time);
        let results: Vec<Result<(f64, f64), GemmError>> = if threads == 1 {
            vec![run()]
        } else {
            pool::pool(threads)?.broadcast(|_| run())
        };
        let mut peak = Peak {
            gops: 0.0,
            threads,
            warmup_s: 0.0,
        };
        for r in results {
            let (ops_per_s, warm) = r?;
            peak.gops += ops_per_s / 1e9;
            peak.warmup_s = peak.warmup_s.max(warm);
        }
        self.peaks.insert((dtype, threads, backend), peak);
        Ok(peak)
    }

    /// Read bandwidth in GB/s of a buffer of `bytes` (at least [`MIN_BANDWIDTH_BYTES`]) by
    /// `threads` threads (0: one per core), each reading its own part; the median of 7 passes
    /// after one that faults the pages in. Cached per size and thread count.
    ///
    /// A buffer that cannot be allocated is [`GemmError::OutOfMemory`] (the check cannot see
    /// memory the system overcommits: ask for what the machine has).
    pub fn bandwidth(&mut self, bytes: usize, threads: usize) -> Result<f64, GemmError> {
        let threads = options(threads, None).checked_thread_count()?;
        let bytes = bytes.max(MIN_BANDWIDTH_BYTES);
        if let Some(&bw) = self.bandwidths.get(&(bytes, threads)) {
            return Ok(bw);
        }
        let pool = if threads > 1 {
            Some(pool::pool(threads)?)
        } else {
            None
        };
        let words = bytes / 8;
        let mut buffer: Vec<u64> = Vec::new();
        buffer
            .try_reserve_exact(words)
            .map_err(|_| GemmError::OutOfMemory { bytes })?;
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
        let mut times: Vec<f64> = (0..7).map(|_| pass()).collect();
        let bw = (words * 8) as f64 / median(&mut times) / 1e9;
        self.bandwidths.insert((bytes, threads), bw);
        Ok(bw)
    }

    /// Times and checks one case (see the [module docs](self)).
    pub fn run(&mut self, case: &Case) -> Result<Report, GemmError> {
        match case.dtype {
            DType::Int8 => self.run_typed::<Int8>(case),
            DType::U8S8 => self.run_typed::<U8S8>(case),
            DType::Bf16 => self.run_typed::<Bf16>(case),
        }
    }

    fn run_typed<P: Precision>(&mut self, case: &Case) -> Result<Report, GemmError> {
        let Case { m, n, k, .. } = *case;
        let gemm = options(case.threads, case.backend).mode(case.mode);
        let (threads, backend) = (gemm.checked_thread_count()?, gemm.resolved_backend()?);
        // Sizes checked before anything is allocated, and every allocation fallible.
        let elements = |rows: usize, cols: usize, operand| {
            rows.checked_mul(cols)
                .ok_or(GemmError::TooLarge { operand })
        };
        let (a_len, b_len, c_len) = (
            elements(m, k, Operand::A)?,
            elements(k, n, Operand::B)?,
            elements(m, n, Operand::C)?,
        );
        check_footprint(case.footprint()?, available_memory())?;
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

        let start = Instant::now();
        let packed = PackedB::<P>::pack(&b, k, n, n)?;
        let pack_s = start.elapsed().as_secs_f64();

        // Warm-up: the first run pays thread start, configuration loads and the first-use trap;
        // on the silicon keep going until the unit is awake and the clock has settled.
        let mut c = try_vec(c_len)?;
        c.extend_from_slice(&c0);
        let start = Instant::now();
        gemm.run(m, &a, k, &packed, &mut c, n)?;
        let first_run_s = start.elapsed().as_secs_f64();
        let (min_runs, min_time) = match backend {
            Backend::Hardware => (3, 0.05),
            Backend::Emulated => (1, 0.0),
        };
        let mut warmup_runs = 1;
        while warmup_runs < min_runs || start.elapsed().as_secs_f64() < min_time {
            if warmup_runs >= 1000 {
                break;
            }
            gemm.run(m, &a, k, &packed, &mut c, n)?;
            warmup_runs += 1;
        }
        let warmup_s = start.elapsed().as_secs_f64();

        // Not `with_capacity(reps)`: `reps` may be anything, and grows only as runs finish.
        let mut times = Vec::new();
        let mut timed_loads = 0;
        for _ in 0..case.reps.max(1) {
            let start = Instant::now();
            let stats = gemm.run(m, &a, k, &packed, &mut c, n)?;
            times.push(start.elapsed().as_secs_f64());
            timed_loads += stats.loads();
        }
        let min_s = times.iter().copied().fold(f64::INFINITY, f64::min);
        let median_s = median(&mut times);

        // The check: one more run from c0, compared with the reference.
        c.copy_from_slice(&c0);
        gemm.run(m, &a, k, &packed, &mut c, n)?;
        let sample = if (m as u128) * (n as u128) * (k as u128) <= 1 << 27 {
            Sample::All
        } else {
            Sample::Some(4096)
        };
        let start_c = (case.mode == Mode::Accumulate).then_some(&c0[..]);
        let check = reference::verify::<P>(m, n, k, &a, k, &b, n, start_c, &c, n, sample)
            .map(|v| match P::DTYPE {
                DType::Bf16 => format!("within the bf16 bound, {v}"),
                _ => format!("exact, {v}"),
            })
            .map_err(|e| e.to_string());

        let ops = 2.0 * m as f64 * n as f64 * k as f64;
        let gops = ops / median_s / 1e9;
        let peak = self.peak(case.dtype, threads, Some(backend))?;
        let b_bytes = b_len * case.dtype.input_bytes();
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
            gops,
            peak_gops: peak.gops,
            bandwidth_gbps,
            bandwidth_roofline_gops,
            roofline_gops: peak.gops.min(bandwidth_roofline_gops),
            warmup_runs,
            warmup_s,
            first_run_s,
            timed_loads,
            check,
        })
    }
}

fn options(threads: usize, backend: Option<Backend>) -> Gemm {
    let gemm = Gemm::new().threads(threads);
    match backend {
        Some(b) => gemm.backend(b),
        None => gemm,
    }
}

fn median(times: &mut [f64]) -> f64 {
    times.sort_by(f64::total_cmp);
    match times.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => times[n / 2],
        n => 0.5 * (times[n / 2 - 1] + times[n / 2]),
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

/// One thread's peak loop: ops per second and the warm-up time.
fn peak_worker(
    dtype: DType,
    backend: Backend,
    warmup: Duration,
    time: Duration,
) -> Result<(f64, f64), GemmError> {
    match dtype {
        DType::Int8 => peak_typed::<Int8>(backend, warmup, time),
        DType::U8S8 => peak_typed::<U8S8>(backend, warmup, time),
        DType::Bf16 => peak_typed::<Bf16>(backend, warmup, time),
    }
}

fn peak_typed<P: Precision>(
    backend: Backend,
    warmup: Duration,
    time: Duration,
) -> Result<(f64, f64), GemmError> {
    let cfg = configs::config(MicroShape::FULL)?;
    // Everything that allocates or may fail comes before the configuration, as in the GEMM's
    // workers (`gemm::work`): the unchecked path trusts the configuration it loaded.
    if backend == Backend::Hardware {
        crate::tile_ops::silicon_supports(P::DTYPE)?;
    }
    configs::check_limits(MicroShape::FULL, amx_runtime::tmul_limits_on(backend)?)?;
    // Operands like the GEMM's own (`random`): the emulator's speed depends on the data (bf16
    // denormals take its slow path), so a peak measured on other data would not be a roof.
    let data = {
        let mut d = AlignedBytes::zeroed(STEP * 2);
        let bytes: Vec<u8> = match P::DTYPE {
            DType::Bf16 => random::<half::bf16>(STEP, 7)
                .iter()
                .flat_map(|x| x.to_bits().to_le_bytes())
                .collect(),
            DType::Int8 | DType::U8S8 => random(STEP * 2, 7),
        };
        d.as_bytes_mut().copy_from_slice(&bytes);
        d
    };
    let mem = Mem::new(data.as_bytes());
    let mut tiles = configure_on(backend, cfg)?;
    #[cfg(target_arch = "x86_64")]
    if let Some(mut ops) = crate::tile_ops::Silicon::new(&mut tiles, P::DTYPE)? {
        return peak_loop::<P, _>(&mut ops, mem, warmup, time);
    }
    peak_loop::<P, _>(&mut Checked::new(&mut tiles), mem, warmup, time)
}

fn peak_loop<P: Precision, O: TileOps>(
    ops: &mut O,
    data: Mem,
    warmup: Duration,
    time: Duration,
) -> Result<(f64, f64), GemmError> {
    // SAFETY: (this block and the one below) the full 2x2 configuration is loaded (all eight
    // tiles 16 x 64, the four dot products checked by the table and against this unit's TMUL
    // limits), and `data` holds 4 KiB, the four tiles loaded. It is still loaded when these
    // run: `peak_typed` allocated and checked everything before configuring, and the loop
    // below calls only the clock, no code outside this crate and the standard library.
    unsafe {
        ops.load::<A0>(data, 0, ROW_BYTES)?;
        ops.load::<A1>(data, TILE, ROW_BYTES)?;
        ops.load::<B0>(data, 2 * TILE, ROW_BYTES)?;
        ops.load::<B1>(data, 3 * TILE, ROW_BYTES)?;
        ops.zero::<C00>()?;
        ops.zero::<C01>()?;
        ops.zero::<C10>()?;
        ops.zero::<C11>()?;
    }
    let round = |ops: &mut O, n: u64| -> Result<(), GemmError> {
        for _ in 0..n {
            // SAFETY: as above.
            unsafe {
                ops.dot::<P, C00, A0, B0>()?;
                ops.dot::<P, C01, A0, B1>()?;
                ops.dot::<P, C10, A1, B0>()?;
                ops.dot::<P, C11, A1, B1>()?;
            }
        }
        Ok(())
    };
    let start = Instant::now();
    let mut batch = 1u64;
    while start.elapsed() < warmup {
        round(ops, batch)?;
        batch = (batch * 2).min(4096);
    }
    let warm = start.elapsed().as_secs_f64();
    // Batches of about 1 ms between clock reads.
    let mut rounds = 0u64;
    let start = Instant::now();
    while start.elapsed() < time {
        round(ops, batch)?;
        rounds += batch;
    }
    let secs = start.elapsed().as_secs_f64();
    let ops_done = rounds as f64 * 4.0 * P::DTYPE.ops_per_tdp() as f64;
    Ok((ops_done / secs, warm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ranges() {
        let x: Vec<i8> = random(10_000, 1);
        assert!(x.iter().any(|&v| v < -100) && x.iter().any(|&v| v > 100));
        let u: Vec<u8> = random(10_000, 1);
        assert!(u.iter().any(|&v| v > 250) && u.iter().any(|&v| v < 5));
        let f: Vec<half::bf16> = random(10_000, 1);
        assert!(f.iter().all(|v| v.to_f32().abs() <= 1.0));
        assert!(f.iter().any(|v| v.to_f32() < -0.5));
    }

    #[test]
    fn json_is_escaped() {
        assert_eq!(json_string("a\"b\\\n"), "\"a\\\"b\\\\\\n\"");
        assert_eq!(json_number(f64::INFINITY), "null");
    }

    #[test]
    fn footprint_is_checked_against_available_memory() {
        assert_eq!(check_footprint(u128::MAX, None), Ok(()));
        assert_eq!(check_footprint(100, Some(100)), Ok(()));
        assert_eq!(
            check_footprint(101, Some(100)),
            Err(GemmError::InsufficientMemory {
                needed: 101,
                available: 100
            })
        );
        assert_eq!(
            check_footprint(u128::MAX, Some(7)),
            Err(GemmError::InsufficientMemory {
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
    fn read_all_sums() {
        let v: Vec<u64> = (0..1000).collect();
        assert_eq!(read_all(&v), 999 * 1000 / 2);
    }
}
