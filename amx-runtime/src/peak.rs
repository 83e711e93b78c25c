//! The emulator against the core's own SIMD peak, measured in this process.
//!
//! The emulator executes tile dot products on the CPU's vector units, with the kernel the CPU
//! supports best (see [`int8_path`] and [`float_path`]). [`simd_peak`] measures the throughput
//! of the very instruction sequence those kernels are built on, register to register, with
//! enough independent accumulators to keep every port busy; [`measure`] also times the
//! emulated TDPBSSD and TDPBF16PS through the public [`TileUnit`] API, and the same products
//! in 2x2 blocks of [`BLOCK_STEPS`] k-steps through [`crate::block::dot_2x2`], and states each
//! as a share of that peak. Both take a few milliseconds; call them when reporting, not per
//! product.
//!
//! | kernel path | int8 products | bf16 / fp16 products |
//! |---|---|---|
//! | [`KernelPath::Avx512`] | VPDPBUSD zmm (AVX-512 VNNI): 64 multiply-adds | VFMADD231PS zmm: 16; bf16 where [`bf16_pairs`]: VDPBF16PS zmm, 32 |
//! | [`KernelPath::AvxVnni`] | VPDPBUSD ymm (AVX-VNNI): 32 multiply-adds | (the AVX2 path) |
//! | [`KernelPath::Avx2`] | VPMADDWD ymm + VPADDD ymm: 16 multiply-adds | VFMADD231PS ymm: 8 |
//! | [`KernelPath::Portable`] | plain Rust (no peak measured) | plain Rust (no peak measured) |
//!
//! Operations count 2 per multiply-add, as GEMM figures do: a 16x16x64 int8 tile product
//! (TDPBSSD on full tiles) is 32,768 operations, a 16x16x32 bf16 one (TDPBF16PS) 16,384.
//!
//! Available with the `peak` feature (off by default): measuring is for tools such as
//! `amx-info` and `amx-bench`, not for the code that runs kernels.
//!
//! ```
//! let report = amx_runtime::peak::measure();
//! println!("{report}");
//! if let Some(share) = report.int8.percent_of_peak() {
//!     assert!(share > 0.0);
//! }
//! ```

use std::fmt;
use std::time::Instant;

use amx_tilecfg::DotKind;

use crate::{tilecfg, Emulator, TileConfig, TileUnit};

pub use crate::unit::numerics::KernelPath;

/// The kernel the emulator runs TDPBSSD, TDPBSUD, TDPBUSD and TDPBUUD with on this CPU.
pub fn int8_path() -> KernelPath {
    crate::unit::numerics::int8_path()
}

/// The kernel the emulator runs TDPBF16PS and TDPFP16PS with on this CPU.
pub fn float_path() -> KernelPath {
    crate::unit::numerics::float_path()
}

/// Whether the emulator runs TDPBF16PS on VDPBF16PS (AVX512_BF16), two k-steps of a lane per
/// instruction: in 2x2 blocks and rows of tiles ([`crate::block`], the GEMM's products), and
/// single instructions whose K is even. On the [`KernelPath::Avx512`] float path, where the
/// CPU's VDPBF16PS passed the emulator's check at start-up and `AMX_EMULATOR_KERNELS` does not
/// cap the kernels at `avx512` or below. The results are the same bits either way.
pub fn bf16_pairs() -> bool {
    crate::unit::numerics::bf16_pairs()
}

/// The measured throughput of one instruction sequence on this core.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Peak {
    /// The kernel path whose instructions were measured.
    pub path: KernelPath,
    /// The instructions of one step, as the kernel issues them (e.g. `"VPMADDWD ymm + VPADDD
    /// ymm"`).
    pub sequence: &'static str,
    /// Operations per step (2 per multiply-add).
    pub ops_per_step: u32,
    /// Independent accumulator chains in the measured loop.
    pub chains: u32,
    /// Nanoseconds per step, the best of several timed runs.
    pub ns_per_step: f64,
}

impl Peak {
    /// Operations per nanosecond, i.e. GOP/s (GFLOP/s for the floating-point sequence).
    pub fn gops(&self) -> f64 {
        f64::from(self.ops_per_step) / self.ns_per_step
    }
}

impl fmt::Display for Peak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.1} GOP/s ({}, {} ops per step, {:.3} ns per step, {} chains, {})",
            self.gops(),
            self.sequence,
            self.ops_per_step,
            self.ns_per_step,
            self.chains,
            self.path
        )
    }
}

/// This core's SIMD peak for the instructions of the emulator's kernels (see the module
/// docs): `None` for a family the emulator runs on its portable path.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SimdPeak {
    /// The integer products' sequence.
    pub int8: Option<Peak>,
    /// The floating-point products' sequence.
    pub float: Option<Peak>,
    /// The bf16 products' sequence: VDPBF16PS zmm where [`bf16_pairs`], else the same as
    /// [`SimdPeak::float`].
    pub bf16: Option<Peak>,
}

/// Measures [`SimdPeak`] on the calling thread's core (a few milliseconds).
pub fn simd_peak() -> SimdPeak {
    let float = measure_peak(float_path(), Family::Float);
    SimdPeak {
        int8: measure_peak(int8_path(), Family::Int8),
        float,
        bf16: if bf16_pairs() {
            measure_peak(float_path(), Family::Bf16Pairs)
        } else {
            float
        },
    }
}

/// An emulated instruction's measured throughput.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Emulated {
    /// The instruction, on full 16 x 64-byte tiles.
    pub instruction: DotKind,
    /// The kernel path that ran it.
    pub path: KernelPath,
    /// Instructions per timed call: 1 for one instruction through [`TileUnit`] on an
    /// [`Emulator`] (checks included; the same tiles every time, so what the emulator derives
    /// from A and B is computed once and kept); [`BLOCK_STEPS`] x 4 for a 2x2 block through
    /// [`crate::block::dot_2x2`].
    pub instructions: u32,
    /// Operations per call (2 per multiply-add).
    pub ops: u32,
    /// Nanoseconds per call, the best of several timed batches.
    pub ns: f64,
}

impl Emulated {
    /// Operations per nanosecond, i.e. GOP/s.
    pub fn gops(&self) -> f64 {
        f64::from(self.ops) / self.ns
    }
}

/// An emulated instruction beside the peak of the sequence its kernel is built on.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Comparison {
    /// The emulated instruction.
    pub emulated: Emulated,
    /// The peak of its kernel's sequence, `None` on the portable path.
    pub peak: Option<Peak>,
}

impl Comparison {
    /// The emulated throughput as a percentage of the peak.
    pub fn percent_of_peak(&self) -> Option<f64> {
        self.peak.map(|p| 100.0 * self.emulated.gops() / p.gops())
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.emulated;
        if e.instructions > 1 {
            write!(
                f,
                "{} 2x2 block of {} k-steps ({}): {:.0} ns per instruction, {:.1} GOP/s",
                e.instruction.mnemonic(),
                e.instructions / 4,
                e.path,
                e.ns / f64::from(e.instructions),
                e.gops()
            )?;
        } else {
            write!(
                f,
                "{} emulated ({}), operands unchanged between instructions: {:.0} ns, {:.1} GOP/s",
                e.instruction.mnemonic(),
                e.path,
                e.ns,
                e.gops()
            )?;
        }
        match (self.peak, self.percent_of_peak()) {
            (Some(peak), Some(share)) => {
                write!(
                    f,
                    " = {share:.0}% of the core's {} peak ({peak})",
                    peak.sequence
                )
            }
            _ => f.write_str(" (portable kernel: no SIMD peak to compare with)"),
        }
    }
}

/// TDPBSSD and TDPBF16PS against the core's peak, measured in one process on one core.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct PeakReport {
    /// TDPBSSD on 16x16x64 bytes against the integer sequence's peak.
    pub int8: Comparison,
    /// TDPBF16PS on 16x16x32 bf16 pairs against the bf16 sequence's peak ([`SimdPeak::bf16`]).
    pub bf16: Comparison,
    /// TDPBSSD in 2x2 blocks of [`BLOCK_STEPS`] k-steps ([`crate::block::dot_2x2`], the
    /// GEMM's micro-kernel on the emulator).
    pub block_int8: Comparison,
    /// TDPBF16PS in 2x2 blocks of [`BLOCK_STEPS`] k-steps.
    pub block_bf16: Comparison,
}

/// The k-steps of the blocks [`measure`] times: a GEMM micro-kernel's typical run.
pub const BLOCK_STEPS: u32 = 16;

impl fmt::Display for PeakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.int8)?;
        writeln!(f, "{}", self.bf16)?;
        writeln!(f, "{}", self.block_int8)?;
        write!(f, "{}", self.block_bf16)
    }
}

/// Measures the emulated TDPBSSD and TDPBF16PS and this core's peak for their kernels, on the
/// calling thread (some tens of milliseconds). Pin the thread for steadier figures.
pub fn measure() -> PeakReport {
    let peak = simd_peak();
    PeakReport {
        int8: Comparison {
            emulated: emulated(DotKind::Tdpbssd),
            peak: peak.int8,
        },
        bf16: Comparison {
            emulated: emulated(DotKind::Tdpbf16ps),
            peak: peak.bf16,
        },
        block_int8: Comparison {
            emulated: emulated_block(DotKind::Tdpbssd),
            peak: peak.int8,
        },
        block_bf16: Comparison {
            emulated: emulated_block(DotKind::Tdpbf16ps),
            peak: peak.bf16,
        },
    }
}

/// The operand bytes the timings use: moderate bf16 values (between 2^-7 and 2^1: no
/// denormals, infinities or NaNs, which would send lanes to the exact model) and varied bytes.
fn timing_data(len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            if i % 2 == 1 {
                // The high byte of every 16-bit element.
                0x3C + (i % 4) as u8
            } else {
                (i * 37 % 251) as u8
            }
        })
        .collect()
}

/// The kernel path of `instruction` and its operations on full tiles.
fn path_and_ops(instruction: DotKind) -> (KernelPath, u32) {
    match instruction {
        DotKind::Tdpbf16ps | DotKind::Tdpfp16ps => (float_path(), 16 * 16 * 32 * 2),
        _ => (int8_path(), 16 * 16 * 64 * 2),
    }
}

/// Times [`BLOCK_STEPS`] k-steps of `instruction` in a 2x2 block.
fn emulated_block(instruction: DotKind) -> Emulated {
    let steps = BLOCK_STEPS;
    let data = timing_data(steps * 2048);
    let mut c = crate::block::Block::zeroed();
    let (path, ops) = path_and_ops(instruction);
    let mut run = || {
        let r = crate::block::dot_2x2(
            instruction,
            &mut c,
            (&data, 2048),
            (&data, 2048),
            steps as usize,
        );
        std::hint::black_box(r).is_ok()
    };
    let ns = if run() {
        best_ns_per(|| _ = run(), 8)
    } else {
        f64::INFINITY
    };
    Emulated {
        instruction,
        path,
        instructions: 4 * steps,
        ops: 4 * steps * ops,
        ns,
    }
}

/// Full tiles: C 16x16 dwords, A and B 16 x 64 bytes.
static FULL: TileConfig = tilecfg! { palette 1; t0: 16x64; t1: 16x64; t2: 16x64 };

/// Times `instruction` on full tiles of moderate values (no denormals, infinities or NaNs on
/// the floating-point path, which would send lanes to the exact model).
fn emulated(instruction: DotKind) -> Emulated {
    let mut emu = Emulator::new();
    let data = timing_data(1024);
    let ready = emu.ldtilecfg(FULL.as_bytes()).is_ok()
        && emu.tilezero(0).is_ok()
        && emu.tileloadd(1, &data, 64).is_ok()
        && emu.tileloadd(2, &data, 64).is_ok();
    let (path, ops) = path_and_ops(instruction);
    let mut run = || {
        let r = match instruction {
            DotKind::Tdpbssd => emu.tdpbssd(0, 1, 2),
            DotKind::Tdpbsud => emu.tdpbsud(0, 1, 2),
            DotKind::Tdpbusd => emu.tdpbusd(0, 1, 2),
            DotKind::Tdpbuud => emu.tdpbuud(0, 1, 2),
            DotKind::Tdpbf16ps => emu.tdpbf16ps(0, 1, 2),
            DotKind::Tdpfp16ps => emu.tdpfp16ps(0, 1, 2),
        };
        std::hint::black_box(r).is_ok()
    };
    // The configuration above is valid, so every call succeeds; were one to fail, the time
    // would be that of the check alone, so it is reported as not measured (infinite).
    let ns = if ready && run() {
        best_ns_per(|| _ = run(), 64)
    } else {
        f64::INFINITY
    };
    Emulated {
        instruction,
        path,
        instructions: 1,
        ops,
        ns,
    }
}

/// Nanoseconds per call of `f`, the best of several batches of `calls` after a warm-up that
/// lets the core reach its clock.
///
/// Generic rather than through `dyn FnMut`: a call layer between two emulated instructions costs
/// several nanoseconds of their overlap, which the figures would then include.
fn best_ns_per(mut f: impl FnMut(), calls: u32) -> f64 {
    fn batch(f: &mut impl FnMut(), calls: u32) -> f64 {
        let t = Instant::now();
        for _ in 0..calls {
            f();
        }
        t.elapsed().as_nanos() as f64 / f64::from(calls)
    }
    let warm = Instant::now();
    while warm.elapsed().as_millis() < 2 {
        batch(&mut f, calls);
    }
    (0..15)
        .map(|_| batch(&mut f, calls))
        .fold(f64::INFINITY, f64::min)
}

#[derive(Clone, Copy)]
enum Family {
    Int8,
    Float,
    /// The bf16 kernels on VDPBF16PS.
    Bf16Pairs,
}

/// Iterations of a peak loop per timed call: long enough for the clock's resolution, short
/// enough to be measured many times.
#[cfg(target_arch = "x86_64")]
const ITERS: usize = 2000;

fn measure_peak(path: KernelPath, family: Family) -> Option<Peak> {
    #[cfg(target_arch = "x86_64")]
    {
        use x86::*;
        let (sequence, ops_per_step, chains, run): (&'static str, u32, u32, unsafe fn(usize)) =
            match (path, family) {
                (KernelPath::Avx512, Family::Int8) => ("VPDPBUSD zmm", 128, 24, vpdpbusd_zmm),
                (KernelPath::Avx512, Family::Float) => ("VFMADD231PS zmm", 32, 24, fma_zmm),
                (KernelPath::Avx512, Family::Bf16Pairs) => ("VDPBF16PS zmm", 64, 24, dpbf16_zmm),
                (KernelPath::AvxVnni, Family::Int8) => ("VPDPBUSD ymm", 64, 12, vpdpbusd_ymm),
                (KernelPath::Avx2, Family::Int8) => {
                    ("VPMADDWD ymm + VPADDD ymm", 32, 12, vpmaddwd_ymm)
                }
                (KernelPath::Avx2, Family::Float) => ("VFMADD231PS ymm", 16, 12, fma_ymm),
                _ => return None,
            };
        // SAFETY: `path` is the kernel path the emulator selected, which it selects only where
        // the CPU has the features each loop is compiled for (AVX-512F + VNNI, AVX-512F,
        // AVX2 + AVX-VNNI, AVX2, AVX2 + FMA), or a path `__int8_peak_on` or `__float_peak_on`
        // checked the CPU for; `Bf16Pairs` is measured only where `bf16_pairs()` found
        // AVX512_BF16.
        let ns = best_ns_per(|| unsafe { run(ITERS) }, 1);
        Some(Peak {
            path,
            sequence,
            ops_per_step,
            chains,
            ns_per_step: ns / (ITERS as f64 * f64::from(chains)),
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (path, family);
        None
    }
}

/// The peak loops: each iteration issues one step on every chain; the operand registers are
/// never written, so the chains are independent and the loop is bound by the ports. Inline
/// asm, so that no compiler can merge, reorder or vectorise them differently.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::asm;

    /// 12 chains of VPMADDWD ymm + VPADDD ymm.
    ///
    /// # Safety
    /// The CPU must support AVX2; `iters > 0`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn vpmaddwd_ymm(iters: usize) {
        // SAFETY: register-only instructions the CPU supports (this function's contract); the
        // clobbered vector registers are declared, the counter is inout.
        unsafe {
            asm!(
                "vpxor xmm14, xmm14, xmm14",
                "vpxor xmm15, xmm15, xmm15",
                "2:",
            "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm0, ymm0, ymm12",
            "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm1, ymm1, ymm13",
            "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm2, ymm2, ymm12",
            "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm3, ymm3, ymm13",
            "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm4, ymm4, ymm12",
            "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm5, ymm5, ymm13",
            "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm6, ymm6, ymm12",
            "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm7, ymm7, ymm13",
            "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm8, ymm8, ymm12",
            "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm9, ymm9, ymm13",
            "vpmaddwd ymm12, ymm14, ymm15", "vpaddd ymm10, ymm10, ymm12",
            "vpmaddwd ymm13, ymm14, ymm15", "vpaddd ymm11, ymm11, ymm13",
                "dec rcx",
                "jnz 2b",
                inout("rcx") iters.max(1) => _,
            // Every vector register is caller-saved in the C ABI: this names them all.
            clobber_abi("C"),
                options(nostack, nomem),
            );
        }
    }

    /// 12 chains of VPDPBUSD ymm, VEX-encoded (`{vex}`: the assembler would otherwise pick
    /// the AVX-512 VL encoding, which a CPU with AVX-VNNI alone does not decode).
    ///
    /// # Safety
    /// The CPU must support AVX2 and AVX-VNNI; `iters > 0`.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn vpdpbusd_ymm(iters: usize) {
        // SAFETY: as in `vpmaddwd_ymm`.
        unsafe {
            asm!(
                "vpxor xmm14, xmm14, xmm14",
                "vpxor xmm15, xmm15, xmm15",
                "2:",
            "{{vex}} vpdpbusd ymm0, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm1, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm2, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm3, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm4, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm5, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm6, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm7, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm8, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm9, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm10, ymm14, ymm15",
            "{{vex}} vpdpbusd ymm11, ymm14, ymm15",
                "dec rcx",
                "jnz 2b",
                inout("rcx") iters.max(1) => _,
            // Every vector register is caller-saved in the C ABI: this names them all.
            clobber_abi("C"),
                options(nostack, nomem),
            );
        }
    }

    /// 12 chains of VFMADD231PS ymm.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA; `iters > 0`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma_ymm(iters: usize) {
        // SAFETY: as in `vpmaddwd_ymm`; zero operands, so no denormal or NaN slows a lane.
        unsafe {
            asm!(
                "vxorps xmm14, xmm14, xmm14",
                "vxorps xmm15, xmm15, xmm15",
                "2:",
            "vfmadd231ps ymm0, ymm14, ymm15",
            "vfmadd231ps ymm1, ymm14, ymm15",
            "vfmadd231ps ymm2, ymm14, ymm15",
            "vfmadd231ps ymm3, ymm14, ymm15",
            "vfmadd231ps ymm4, ymm14, ymm15",
            "vfmadd231ps ymm5, ymm14, ymm15",
            "vfmadd231ps ymm6, ymm14, ymm15",
            "vfmadd231ps ymm7, ymm14, ymm15",
            "vfmadd231ps ymm8, ymm14, ymm15",
            "vfmadd231ps ymm9, ymm14, ymm15",
            "vfmadd231ps ymm10, ymm14, ymm15",
            "vfmadd231ps ymm11, ymm14, ymm15",
                "dec rcx",
                "jnz 2b",
                inout("rcx") iters.max(1) => _,
            // Every vector register is caller-saved in the C ABI: this names them all.
            clobber_abi("C"),
                options(nostack, nomem),
            );
        }
    }

    /// 24 chains of VPDPBUSD zmm.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512 VNNI; `iters > 0`.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn vpdpbusd_zmm(iters: usize) {
        // SAFETY: as in `vpmaddwd_ymm`.
        unsafe {
            asm!(
                "vpxord zmm24, zmm24, zmm24",
                "vpxord zmm25, zmm25, zmm25",
                "2:",
            "vpdpbusd zmm0, zmm24, zmm25",
            "vpdpbusd zmm1, zmm24, zmm25",
            "vpdpbusd zmm2, zmm24, zmm25",
            "vpdpbusd zmm3, zmm24, zmm25",
            "vpdpbusd zmm4, zmm24, zmm25",
            "vpdpbusd zmm5, zmm24, zmm25",
            "vpdpbusd zmm6, zmm24, zmm25",
            "vpdpbusd zmm7, zmm24, zmm25",
            "vpdpbusd zmm8, zmm24, zmm25",
            "vpdpbusd zmm9, zmm24, zmm25",
            "vpdpbusd zmm10, zmm24, zmm25",
            "vpdpbusd zmm11, zmm24, zmm25",
            "vpdpbusd zmm12, zmm24, zmm25",
            "vpdpbusd zmm13, zmm24, zmm25",
            "vpdpbusd zmm14, zmm24, zmm25",
            "vpdpbusd zmm15, zmm24, zmm25",
            "vpdpbusd zmm16, zmm24, zmm25",
            "vpdpbusd zmm17, zmm24, zmm25",
            "vpdpbusd zmm18, zmm24, zmm25",
            "vpdpbusd zmm19, zmm24, zmm25",
            "vpdpbusd zmm20, zmm24, zmm25",
            "vpdpbusd zmm21, zmm24, zmm25",
            "vpdpbusd zmm22, zmm24, zmm25",
            "vpdpbusd zmm23, zmm24, zmm25",
                "dec rcx",
                "jnz 2b",
                inout("rcx") iters.max(1) => _,
            // Every vector register is caller-saved in the C ABI: this names them all.
            clobber_abi("C"),
                options(nostack, nomem),
            );
        }
    }

    /// 24 chains of VFMADD231PS zmm.
    ///
    /// # Safety
    /// The CPU must support AVX-512F; `iters > 0`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fma_zmm(iters: usize) {
        // SAFETY: as in `fma_ymm`.
        unsafe {
            asm!(
                "vpxord zmm24, zmm24, zmm24",
                "vpxord zmm25, zmm25, zmm25",
                "2:",
            "vfmadd231ps zmm0, zmm24, zmm25",
            "vfmadd231ps zmm1, zmm24, zmm25",
            "vfmadd231ps zmm2, zmm24, zmm25",
            "vfmadd231ps zmm3, zmm24, zmm25",
            "vfmadd231ps zmm4, zmm24, zmm25",
            "vfmadd231ps zmm5, zmm24, zmm25",
            "vfmadd231ps zmm6, zmm24, zmm25",
            "vfmadd231ps zmm7, zmm24, zmm25",
            "vfmadd231ps zmm8, zmm24, zmm25",
            "vfmadd231ps zmm9, zmm24, zmm25",
            "vfmadd231ps zmm10, zmm24, zmm25",
            "vfmadd231ps zmm11, zmm24, zmm25",
            "vfmadd231ps zmm12, zmm24, zmm25",
            "vfmadd231ps zmm13, zmm24, zmm25",
            "vfmadd231ps zmm14, zmm24, zmm25",
            "vfmadd231ps zmm15, zmm24, zmm25",
            "vfmadd231ps zmm16, zmm24, zmm25",
            "vfmadd231ps zmm17, zmm24, zmm25",
            "vfmadd231ps zmm18, zmm24, zmm25",
            "vfmadd231ps zmm19, zmm24, zmm25",
            "vfmadd231ps zmm20, zmm24, zmm25",
            "vfmadd231ps zmm21, zmm24, zmm25",
            "vfmadd231ps zmm22, zmm24, zmm25",
            "vfmadd231ps zmm23, zmm24, zmm25",
                "dec rcx",
                "jnz 2b",
                inout("rcx") iters.max(1) => _,
            // Every vector register is caller-saved in the C ABI: this names them all.
            clobber_abi("C"),
                options(nostack, nomem),
            );
        }
    }

    /// 24 chains of VDPBF16PS zmm.
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX512_BF16; `iters > 0`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dpbf16_zmm(iters: usize) {
        // SAFETY: as in `fma_ymm`.
        unsafe {
            asm!(
                "vpxord zmm24, zmm24, zmm24",
                "vpxord zmm25, zmm25, zmm25",
                "2:",
                "vdpbf16ps zmm0, zmm24, zmm25",
                "vdpbf16ps zmm1, zmm24, zmm25",
                "vdpbf16ps zmm2, zmm24, zmm25",
                "vdpbf16ps zmm3, zmm24, zmm25",
                "vdpbf16ps zmm4, zmm24, zmm25",
                "vdpbf16ps zmm5, zmm24, zmm25",
                "vdpbf16ps zmm6, zmm24, zmm25",
                "vdpbf16ps zmm7, zmm24, zmm25",
                "vdpbf16ps zmm8, zmm24, zmm25",
                "vdpbf16ps zmm9, zmm24, zmm25",
                "vdpbf16ps zmm10, zmm24, zmm25",
                "vdpbf16ps zmm11, zmm24, zmm25",
                "vdpbf16ps zmm12, zmm24, zmm25",
                "vdpbf16ps zmm13, zmm24, zmm25",
                "vdpbf16ps zmm14, zmm24, zmm25",
                "vdpbf16ps zmm15, zmm24, zmm25",
                "vdpbf16ps zmm16, zmm24, zmm25",
                "vdpbf16ps zmm17, zmm24, zmm25",
                "vdpbf16ps zmm18, zmm24, zmm25",
                "vdpbf16ps zmm19, zmm24, zmm25",
                "vdpbf16ps zmm20, zmm24, zmm25",
                "vdpbf16ps zmm21, zmm24, zmm25",
                "vdpbf16ps zmm22, zmm24, zmm25",
                "vdpbf16ps zmm23, zmm24, zmm25",
                "dec rcx",
                "jnz 2b",
                inout("rcx") iters.max(1) => _,
                // Every vector register is caller-saved in the C ABI: this names them all.
                clobber_abi("C"),
                options(nostack, nomem),
            );
        }
    }
}

/// The integer kernels this CPU can run, the selected one first, for benchmarks that compare
/// them (`benches/emulator_paths.rs`); not part of the API.
#[doc(hidden)]
pub fn __int8_paths() -> Vec<KernelPath> {
    use crate::unit::numerics::int8_path_available;
    let mut paths = vec![int8_path()];
    for path in [
        KernelPath::Avx512,
        KernelPath::AvxVnni,
        KernelPath::Avx2,
        KernelPath::Portable,
    ] {
        if int8_path_available(path) && !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}

/// TDPBSSD on full tiles with the integer kernel of `path` (`false` where the CPU lacks it),
/// for `benches/emulator_paths.rs`; not part of the API.
#[doc(hidden)]
pub fn __int8_kernel_on(
    path: KernelPath,
    c: &mut [u8; 1024],
    a: &[u8; 1024],
    b: &[u8; 1024],
) -> bool {
    crate::unit::numerics::dot_int8_on(path, c, a, b, (16, 16, 16), (true, true))
}

/// TDPBSSD in 2x2 blocks of `steps` k-steps (see [`crate::block::dot_2x2`]) with the integer
/// kernels of `path`: A's steps are `2048` bytes apart in `a`, B's in `b`. `false` where the
/// CPU lacks the kernels or the operands are too short. For `benches/emulator_paths.rs`; not
/// part of the API.
#[doc(hidden)]
pub fn __int8_block_on(
    path: KernelPath,
    c: &mut [[u8; 1024]; 4],
    a: &[u8],
    b: &[u8],
    steps: usize,
) -> bool {
    use crate::unit::numerics::block::{tdpbssd_2x2_on, Operands};
    match Operands::new((a, 2048), (b, 2048), steps) {
        Ok(ops) => tdpbssd_2x2_on(path, c, &ops),
        Err(_) => false,
    }
}

/// The floating-point kernels this CPU can run, the selected one first, for
/// `benches/emulator_paths.rs`; not part of the API.
#[doc(hidden)]
pub fn __float_paths() -> Vec<KernelPath> {
    use crate::unit::numerics::float_path_available;
    let mut paths = vec![float_path()];
    for path in [KernelPath::Avx512, KernelPath::Avx2, KernelPath::Portable] {
        if float_path_available(path) && !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}

/// TDPBF16PS in 2x2 blocks of `steps` k-steps with the floating-point kernels of `path`, the
/// block kernel (`fused`) or instruction by instruction: A's steps `2048` bytes apart in `a`,
/// B's in `b`. `false` where the CPU lacks the kernels or the operands are too short. For
/// `benches/emulator_paths.rs`; not part of the API.
#[doc(hidden)]
pub fn __bf16_block_on(
    path: KernelPath,
    fused: bool,
    c: &mut [[u8; 1024]; 4],
    a: &[u8],
    b: &[u8],
    steps: usize,
) -> bool {
    use crate::unit::numerics::block::{bf16_2x2_on, Operands};
    match Operands::new((a, 2048), (b, 2048), steps) {
        Ok(ops) => bf16_2x2_on(path, fused, c, &ops),
        Err(_) => false,
    }
}

/// The peak of the instruction sequence of `path`'s floating-point kernel (`None` where the
/// CPU lacks it or the path has no measured sequence), for `benches/emulator_paths.rs`; not
/// part of the API.
#[doc(hidden)]
pub fn __float_peak_on(path: KernelPath) -> Option<Peak> {
    if !crate::unit::numerics::float_path_available(path) {
        return None;
    }
    measure_peak(path, Family::Float)
}

/// The peak of the instruction sequence of `path`'s integer kernel (`None` where the CPU lacks
/// it or the path has no measured sequence), for `benches/emulator_paths.rs`; not part of the
/// API.
#[doc(hidden)]
pub fn __int8_peak_on(path: KernelPath) -> Option<Peak> {
    if !crate::unit::numerics::int8_path_available(path) {
        return None;
    }
    measure_peak(path, Family::Int8)
}

/// The emulator's arithmetic alone: `C += A x B` on full tiles (M = 16, N = 16 dwords, K = 16
/// dwords) with the kernel the emulator runs, without its tile state, checks or the zeroing of
/// unused rows. For the layer benchmarks (`benches/emulator_layers.rs`); not part of the API.
#[doc(hidden)]
pub fn __kernel(kind: DotKind, c: &mut [u8; 1024], a: &[u8; 1024], b: &[u8; 1024]) {
    use crate::unit::numerics;
    let (m, n, k) = (16, 16, 16);
    match kind {
        DotKind::Tdpbssd => numerics::dot_int8(c, a, b, m, n, k, true, true),
        DotKind::Tdpbsud => numerics::dot_int8(c, a, b, m, n, k, true, false),
        DotKind::Tdpbusd => numerics::dot_int8(c, a, b, m, n, k, false, true),
        DotKind::Tdpbuud => numerics::dot_int8(c, a, b, m, n, k, false, false),
        DotKind::Tdpbf16ps => numerics::dot_bf16(c, a, b, m, n, k),
        DotKind::Tdpfp16ps => numerics::dot_fp16(c, a, b, m, n, k),
    }
}
