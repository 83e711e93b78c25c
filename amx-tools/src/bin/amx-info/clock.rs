//! The time base: RDTSC fenced with LFENCE, the TSC frequency measured against `Instant`, the
//! core clock estimated from chains of dependent one-cycle ADDs, and the slope harness every
//! per-instruction figure comes from.

use core::arch::x86_64::{_mm_lfence, _rdtsc};
use std::time::{Duration, Instant};

use amx_tools::Sample;

/// Reads the time-stamp counter once every earlier instruction has completed locally, and before
/// any later one starts (LFENCE on both sides of RDTSC).
#[inline(always)]
pub fn tsc() -> u64 {
    // SAFETY: LFENCE (SSE2, part of the x86-64 baseline) and RDTSC exist on every x86-64 CPU;
    // they order execution and read the counter, touching no memory.
    unsafe {
        _mm_lfence();
        let t = _rdtsc();
        _mm_lfence();
        t
    }
}

/// TSC ticks per nanosecond: `samples` windows of `window` each, timed by both clocks; median.
pub fn tsc_ghz(window: Duration, samples: usize) -> Option<Sample> {
    let mut rates = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let t0 = tsc();
        while start.elapsed() < window {
            std::hint::spin_loop();
        }
        let t1 = tsc();
        let ns = start.elapsed().as_nanos() as f64;
        rates.push(t1.wrapping_sub(t0) as f64 / ns);
    }
    Sample::of(&rates)
}

/// Dependent ADDs per [`add_block!`] in [`add_chain`].
pub const ADDS_PER_BLOCK: u64 = 100;

/// `$n` dependent `add x, y` (register to register): `$n` core cycles, whatever the clock, since
/// an ADD has a latency of one cycle on every x86-64 core. (`add reg, imm` would not do: recent
/// cores, Golden Cove and later, fold chains of small immediate ADDs at rename and retire several
/// per cycle; a register operand defeats that. [`imul_chain`] cross-checks.) Touches no memory.
macro_rules! add_block {
    ($x:ident, $y:ident, $n:literal) => {
        // SAFETY: register arithmetic only (ADDs into one register, which also write the flags,
        // hence no `preserves_flags`); no memory, no stack.
        unsafe {
            ::core::arch::asm!(
                concat!(".rept ", $n),
                "add {x}, {y}",
                ".endr",
                x = inout(reg) $x,
                y = in(reg) $y,
                options(nomem, nostack),
            )
        }
    };
}
#[cfg(target_os = "linux")]
pub(crate) use add_block;

/// `blocks` x [`ADDS_PER_BLOCK`] dependent ADDs.
#[inline(never)]
pub fn add_chain(blocks: u64) -> u64 {
    let (mut x, y) = (0u64, std::hint::black_box(1u64));
    for _ in 0..blocks {
        add_block!(x, y, 100);
    }
    x
}

/// `blocks` x 100 dependent IMULs (three cycles each on every recent x86-64 core).
#[inline(never)]
pub fn imul_chain(blocks: u64) -> u64 {
    let mut x = std::hint::black_box(3u64);
    for _ in 0..blocks {
        // SAFETY: register arithmetic only (IMUL writes the flags); no memory, no stack.
        unsafe {
            core::arch::asm!(
                ".rept 100",
                "imul {x}, {x}",
                ".endr",
                x = inout(reg) x,
                options(nomem, nostack),
            )
        }
    }
    x
}

/// TSC ticks per core cycle while only scalar code runs: the slope of [`add_chain`].
pub fn ticks_per_cycle_idle(reps: usize) -> Option<Sample> {
    per_op(reps, 200, ADDS_PER_BLOCK, |n| {
        std::hint::black_box(add_chain(n));
    })
}

/// The same from a chain of IMULs (three cycles each), as a cross-check.
pub fn ticks_per_cycle_imul(reps: usize) -> Option<Sample> {
    per_op(reps, 100, 3 * 100, |n| {
        std::hint::black_box(imul_chain(n));
    })
}

/// TSC ticks per operation of `body(n)` (which runs `n` iterations of `ops_per_iter` operations):
/// the difference between a run of `iters` and one of `3 * iters` iterations divided by the
/// operations it adds, so fixed costs (the fences, a drain at the end, the loop entry) cancel.
/// One warm-up run, then the median of `reps` differences.
pub fn per_op(
    reps: usize,
    iters: u64,
    ops_per_iter: u64,
    mut body: impl FnMut(u64),
) -> Option<Sample> {
    body(iters);
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = tsc();
        body(iters);
        let t1 = tsc();
        body(3 * iters);
        let t2 = tsc();
        let short = t1.wrapping_sub(t0) as f64;
        let long = t2.wrapping_sub(t1) as f64;
        v.push((long - short) / (2 * iters * ops_per_iter) as f64);
    }
    Sample::of(&v)
}

/// Spins (no AMX, no memory traffic) for `ticks` TSC ticks.
#[cfg(target_os = "linux")]
pub fn spin_ticks(ticks: u64) {
    let end = tsc().wrapping_add(ticks);
    while tsc() < end {
        std::hint::spin_loop();
    }
}
