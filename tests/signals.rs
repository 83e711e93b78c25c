//! A timer signal firing many times during a long kernel does not corrupt it.
//!
//! `setitimer(ITIMER_REAL)` raises SIGALRM every 100 us while a kernel of thousands of dot
//! products accumulates into one C tile on the backend. The handler (installed with
//! `sigaction`) does floating-point and vector work (SSE, and AVX2 / AVX-512 where the CPU has
//! them), changes MXCSR to round-toward-zero with FTZ and DAZ, and on the silicon also loads its
//! own tile configuration and overwrites every tile: the kernel must save the interrupted
//! thread's state (tiles included) in the signal frame and restore it on return. The result must
//! equal the reference: a plain-Rust one for TDPBSSD, and the same sequence replayed on an
//! emulator without signals for TDPBF16PS.
//!
//! ITIMER_REAL signals are sent to the process, and Linux hands them to its main thread, which
//! in a test binary is the harness, not the test. The handler therefore forwards a signal that
//! lands elsewhere to the kernel's thread with `tgkill`, and counts only the deliveries on that
//! thread. The test fails unless at least [`MIN_SIGNALS`] of them arrived during the kernel,
//! since fewer would prove nothing.
//!
//! Where the CPU lacks AMX, the silicon tests run on the trap engine: every tile instruction,
//! the handler's included, is a trapped SIGILL, and the handler opens a
//! `trap::HandlerScope` to get the state separation Linux gives it on the silicon.
//!
//! The handler stays installed after the tests (a late signal then finds no kernel thread and
//! does nothing), and the tests in this file run one at a time.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use amx_runtime::{configure_on, Backend, Emulator, TileConfig, TileUnit};
use amx_test_support::{skip, Kind};

/// Deliveries on the kernel's thread needed for the test to mean something.
const MIN_SIGNALS: usize = 200;
/// Dot products the kernel runs at least.
const MIN_DOTS: usize = 3000;
/// Dot products the kernel runs at most (it stops earlier once it has seen the signals).
const MAX_DOTS: usize = 20_000_000;
/// Dot products of the bf16 kernel at most: its reference is a replay on the emulator.
const MAX_BF16_DOTS: usize = 20_000;
/// The timer period.
const PERIOD_US: i64 = 100;
/// The timer period on the trap engine, where the handler's own ten tile instructions are ten
/// trapped signals: at 100 us the handler would never finish before the next one.
const TRAPPED_PERIOD_US: i64 = 2000;
/// How long a kernel may run before the test gives up waiting for signals.
const DEADLINE: Duration = Duration::from_secs(60);

/// The thread id (gettid) of the thread running the kernel; 0 when none.
static KERNEL_TID: AtomicI32 = AtomicI32::new(0);
/// Signals handled on the kernel's thread.
static DELIVERED: AtomicUsize = AtomicUsize::new(0);
/// Signals that landed on another thread and were forwarded.
static FORWARDED: AtomicUsize = AtomicUsize::new(0);
/// Whether the handler also overwrites the tiles (the silicon only).
static CLOBBER_TILES: AtomicBool = AtomicBool::new(false);
/// Results of the handler's arithmetic, so that it is not optimized away.
static SINK: AtomicU64 = AtomicU64::new(0);
/// The vector extensions the handler uses, decided before the timer starts.
static HAS_AVX2: AtomicBool = AtomicBool::new(false);
static HAS_AVX512: AtomicBool = AtomicBool::new(false);
/// Whether the handler's tile products include a TDPBF16PS (AMX-BF16 present, or emulated).
static HAS_AMX_BF16: AtomicBool = AtomicBool::new(false);

/// One test at a time: the timer and the counters are per process.
static SERIAL: Mutex<()> = Mutex::new(());

/// The handler's tile configuration: palette 1, all eight tiles 16 x 64 (bytes 16 + 2t = 64,
/// bytes 48 + t = 16). Different from the kernels', so the kernel's configuration must come
/// back from the signal frame.
static HANDLER_CONFIG: [u8; 64] = amx_test_support::TileImage::palette(1)
    .all_tiles(16, 64)
    .bytes();
/// What the handler loads into the tiles.
static HANDLER_DATA: [u8; 1024] = [0x7B; 1024];

fn gettid() -> i32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

extern "C" fn on_alarm(_signal: libc::c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    let target = KERNEL_TID.load(Ordering::Acquire);
    if target != 0 {
        if gettid() != target {
            FORWARDED.fetch_add(1, Ordering::Relaxed);
            // SAFETY: tgkill sends SIGALRM to one thread of this process (async-signal-safe); if
            // the thread is gone it fails with ESRCH and nothing happens.
            unsafe {
                libc::syscall(
                    libc::SYS_tgkill,
                    libc::getpid(),
                    libc::c_long::from(target),
                    libc::c_long::from(libc::SIGALRM),
                );
            }
        } else {
            DELIVERED.fetch_add(1, Ordering::Relaxed);
            disturb();
        }
    }
    // SAFETY: as above; the interrupted code must see its own errno again.
    unsafe { *libc::__errno_location() = errno };
}

/// The handler's work on the kernel's thread: changes MXCSR, floating-point and vector
/// arithmetic, and (on the silicon) its own tile configuration and data.
fn disturb() {
    // Round toward zero, flush-to-zero, denormals-are-zero, all exceptions masked.
    let value: u32 = 0x1F80 | (3 << 13) | (1 << 15) | (1 << 6);
    // SAFETY: LDMXCSR reads the four bytes of `value`, a valid MXCSR value (no reserved bit
    // set); the kernel restores the interrupted code's MXCSR from the signal frame.
    unsafe {
        core::arch::asm!("ldmxcsr [{}]", in(reg) &value, options(nostack, readonly));
    }
    let mut x = 0.0f64;
    for i in 1..64 {
        x += (f64::from(i)).sqrt() / 3.0;
    }
    let v = sse_work(x as f32);
    let v = if HAS_AVX512.load(Ordering::Relaxed) {
        // SAFETY: the CPU reports AVX-512F (checked before the timer started).
        unsafe { avx512_work(v) }
    } else if HAS_AVX2.load(Ordering::Relaxed) {
        // SAFETY: the CPU reports AVX2 (checked before the timer started).
        unsafe { avx2_work(v) }
    } else {
        v
    };
    SINK.fetch_add(u64::from(v.to_bits()) ^ x.to_bits(), Ordering::Relaxed);
    if CLOBBER_TILES.load(Ordering::Relaxed) {
        clobber_tiles();
    }
}

fn sse_work(seed: f32) -> f32 {
    use core::arch::x86_64::*;
    // SAFETY: SSE and SSE2 are part of the x86-64 baseline; register arithmetic only.
    unsafe {
        let mut acc = _mm_set1_ps(seed);
        let k = _mm_set_ps(1.000_1, 0.999_9, 1.000_3, 0.999_7);
        for i in 0..32 {
            acc = _mm_add_ps(_mm_mul_ps(acc, k), _mm_set1_ps(i as f32 * 1e-3));
        }
        let d = _mm_sqrt_pd(_mm_set1_pd(f64::from(seed) + 2.0));
        _mm_cvtss_f32(acc) + _mm_cvtsd_f64(d) as f32
    }
}

/// # Safety
/// The CPU implements AVX2.
#[target_feature(enable = "avx2")]
unsafe fn avx2_work(seed: f32) -> f32 {
    use core::arch::x86_64::*;
    let mut acc = _mm256_set1_ps(seed);
    for i in 0..32 {
        acc = _mm256_add_ps(
            _mm256_mul_ps(acc, _mm256_set1_ps(1.000_1)),
            _mm256_set1_ps(i as f32),
        );
    }
    _mm256_cvtss_f32(acc)
}

/// # Safety
/// The CPU implements AVX-512F.
#[target_feature(enable = "avx512f")]
unsafe fn avx512_work(seed: f32) -> f32 {
    use core::arch::x86_64::*;
    let mut acc = _mm512_set1_ps(seed);
    for i in 0..32 {
        acc = _mm512_fmadd_ps(acc, _mm512_set1_ps(1.000_1), _mm512_set1_ps(i as f32));
    }
    _mm512_reduce_add_ps(acc)
}

/// Loads the handler's own configuration and overwrites every tile. Called only when the kernel
/// runs on the silicon.
fn clobber_tiles() {
    use amx_runtime::intrinsics::*;
    // Under the trap engine this program installed itself, the handler asks for what Linux
    // gives it on the silicon: INIT tile state now, the interrupted state back on return. On
    // the silicon it does nothing.
    let _scope = amx_trap::handler_scope();
    let cfg = HANDLER_CONFIG.as_ptr();
    let data = HANDLER_DATA.as_ptr();
    // SAFETY: CLOBBER_TILES is set only after `Hardware::new()` succeeded (AMX-TILE, AMX-INT8
    // checked by the caller, XCR0, permission granted). HANDLER_CONFIG is a palette-1 image
    // with zero reserved bytes and eight 16 x 64 tiles, which every AMX CPU's palette 1 accepts
    // (the caller checked this CPU's table). Each load reads 16 rows of 64 bytes at stride 64
    // from the 1 KiB HANDLER_DATA; t0, t1, t2 are distinct 16 x 64 tiles TDPBSSD accepts. The
    // state is the signal handler's own: the kernel restores the interrupted one on return.
    unsafe {
        _tile_loadconfig(cfg);
        _tile_loadd::<0>(data, 64);
        _tile_loadd::<1>(data, 64);
        _tile_loadd::<2>(data, 64);
        _tile_loadd::<3>(data, 64);
        _tile_loadd::<4>(data, 64);
        _tile_loadd::<5>(data, 64);
        _tile_loadd::<6>(data, 64);
        _tile_loadd::<7>(data, 64);
        _tile_dpbssd::<0, 1, 2>();
    }
    // A product of each kind on the kernel's operand tiles, so that whichever the handler
    // interrupted, it runs one like it: an emulator keeps forms derived from its A and B tiles,
    // and the interrupted product must not see the handler's.
    if HAS_AMX_BF16.load(Ordering::Relaxed) {
        // SAFETY: as above; the CPU (or the engine) has AMX-BF16 (checked before the timer
        // started), and t3, t1, t2 are distinct 16 x 64 tiles TDPBF16PS accepts.
        unsafe { _tile_dpbf16ps::<3, 1, 2>() };
    }
}

/// Installs the handler once per process.
fn install_handler() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        HAS_AVX2.store(is_x86_feature_detected!("avx2"), Ordering::Relaxed);
        HAS_AVX512.store(is_x86_feature_detected!("avx512f"), Ordering::Relaxed);
        // SAFETY: an all-zero sigaction is a valid value of this plain C struct.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: `action.sa_mask` is a live sigset_t; sigemptyset only writes it.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: `action` is initialized; the handler only uses async-signal-safe operations
        // (atomics, system calls, register arithmetic, and AMX instructions whose state the
        // kernel saves); the old action is not needed.
        let rc = unsafe { libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut()) };
        assert_eq!(rc, 0, "sigaction: {}", std::io::Error::last_os_error());
    });
}

/// This thread's MXCSR.
fn mxcsr() -> u32 {
    let mut value = 0u32;
    // SAFETY: STMXCSR writes the four bytes of `value`, a live local.
    unsafe { core::arch::asm!("stmxcsr [{}]", in(reg) &mut value, options(nostack)) };
    value
}

/// Arms (`period_us > 0`) or disarms (`0`) the interval timer.
fn set_timer(period_us: i64) {
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: period_us as libc::suseconds_t,
    };
    let timer = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: `timer` is a live itimerval; the old value is not needed.
    let rc = unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "setitimer: {}", std::io::Error::last_os_error());
}

/// Arms the timer for the duration of a kernel on this thread; disarms it on drop (also when the
/// kernel panics).
struct Alarm {
    start: usize,
}

impl Alarm {
    fn start(period_us: i64) -> Alarm {
        install_handler();
        KERNEL_TID.store(gettid(), Ordering::Release);
        let start = DELIVERED.load(Ordering::Relaxed);
        set_timer(period_us);
        Alarm { start }
    }

    /// Signals delivered to the kernel's thread since the start.
    fn delivered(&self) -> usize {
        DELIVERED.load(Ordering::Relaxed) - self.start
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        set_timer(0);
        KERNEL_TID.store(0, Ordering::Release);
    }
}

/// Pairs of A and B blocks (16 x 64 bytes each) the kernels cycle through.
const PAIRS: usize = 4;

fn block(seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..1024)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        })
        .collect()
}

/// bf16 data: normal numbers near 1 (high byte 0x3F or 0xBF), so sums stay finite.
fn bf16_block(seed: u64) -> Vec<u8> {
    let mut raw = block(seed);
    for (i, b) in raw.iter_mut().enumerate() {
        if i % 2 == 1 {
            *b = if *b & 1 == 0 { 0x3F } else { 0xBF };
        }
    }
    raw
}

/// C (t0, 16 x 16 dwords), A (t1, 16 x 64 bytes), B (t2, 16 x 64 bytes).
fn kernel_config() -> TileConfig {
    TileConfig::builder()
        .tile(0, 16, 64)
        .tile(1, 16, 64)
        .tile(2, 16, 64)
        .build()
        .expect("a valid configuration")
}

/// Which dot product the kernel runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dot {
    Int8,
    Bf16,
}

/// The kernel: C loaded from `c0`, then for i = 0, 1, ...: load A and B of pair i % PAIRS,
/// C += A x B; stops after `MIN_DOTS` once `MIN_SIGNALS` arrived (or after `max`). Returns C,
/// the number of dot products and the signals delivered meanwhile.
fn run_kernel<U: TileUnit + ?Sized>(
    unit: &mut U,
    dot: Dot,
    c0: &[u8],
    pairs: &[(Vec<u8>, Vec<u8>)],
    alarm: Option<&Alarm>,
    fixed: Option<usize>,
    pad: Duration,
) -> (Vec<u8>, usize, usize) {
    let max = if dot == Dot::Bf16 {
        MAX_BF16_DOTS
    } else {
        MAX_DOTS
    };
    let start = Instant::now();
    // The handler sets MXCSR to round-toward-zero with FTZ and DAZ; the kernel must give the
    // interrupted code its own MXCSR back every time.
    let mxcsr0 = mxcsr();
    unit.tileloadd(0, c0, 64).expect("load C");
    let mut dots = 0;
    loop {
        let done = match fixed {
            Some(n) => dots >= n,
            None => {
                let seen = alarm.map_or(0, Alarm::delivered);
                (dots >= MIN_DOTS && seen >= MIN_SIGNALS)
                    || dots >= max
                    || start.elapsed() > DEADLINE
            }
        };
        if done {
            break;
        }
        let (a, b) = &pairs[dots % PAIRS];
        unit.tileloadd(1, a, 64).expect("load A");
        unit.tileloadd(2, b, 64).expect("load B");
        match dot {
            Dot::Int8 => unit.tdpbssd(0, 1, 2).expect("TDPBSSD"),
            Dot::Bf16 => unit.tdpbf16ps(0, 1, 2).expect("TDPBF16PS"),
        }
        dots += 1;
        assert_eq!(
            mxcsr(),
            mxcsr0,
            "MXCSR changed under the kernel after {dots} dot products"
        );
        if !pad.is_zero() {
            // Scalar work with the tiles live, so that signals land inside the kernel even when
            // the silicon runs the dot products in nanoseconds.
            let until = Instant::now() + pad;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }
    let mut c = vec![0u8; 1024];
    unit.tilestored(0, &mut c, 64).expect("store C");
    (c, dots, alarm.map_or(0, Alarm::delivered))
}

/// C0 + sum over the dot products of A_p x B_p, in plain Rust (docs/semantics.md section 9).
fn int8_reference(c0: &[u8], pairs: &[(Vec<u8>, Vec<u8>)], dots: usize) -> Vec<u8> {
    let mut c: Vec<i32> = c0
        .chunks(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    for (p, (a, b)) in pairs.iter().enumerate() {
        // How many of the `dots` products used pair p.
        let count = (dots / PAIRS + usize::from(p < dots % PAIRS)) as u32 as i32;
        for m in 0..16 {
            for n in 0..16 {
                let mut acc = 0i32;
                for k in 0..64 {
                    let x = i32::from(a[m * 64 + k] as i8);
                    let y = i32::from(b[(k / 4) * 64 + 4 * n + k % 4] as i8);
                    acc = acc.wrapping_add(x.wrapping_mul(y));
                }
                c[m * 16 + n] = c[m * 16 + n].wrapping_add(acc.wrapping_mul(count));
            }
        }
    }
    c.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn check(backend: Backend, dot: Dot) {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..PAIRS as u64)
        .map(|p| match dot {
            Dot::Int8 => (block(2 * p + 1), block(2 * p + 2)),
            Dot::Bf16 => (bf16_block(2 * p + 1), bf16_block(2 * p + 2)),
        })
        .collect();
    let c0 = match dot {
        Dot::Int8 => block(99),
        // C as f32 1.0 in every lane.
        Dot::Bf16 => (0..256).flat_map(|_| 1.0f32.to_le_bytes()).collect(),
    };
    let trapped = backend == Backend::Hardware && amx_trap::is_active();
    // On the silicon a dot product takes nanoseconds: pad each iteration so that the kernel
    // lasts long enough for the timer. The bf16 kernel is capped (its reference is a replay on
    // the emulator), so it is padded on both backends, by enough that its MAX_BF16_DOTS
    // iterations outlast MIN_SIGNALS timer periods whatever a dot product costs (on the trap
    // engine 30 us x 20 000 = 600 ms against 200 x 2 ms).
    let pad = match (backend, dot) {
        (Backend::Hardware, Dot::Int8) => Duration::from_micros(2),
        (_, Dot::Int8) => Duration::ZERO,
        (_, Dot::Bf16) if trapped => Duration::from_micros(30),
        (_, Dot::Bf16) => Duration::from_micros(5),
    };
    // Decided now, with the silicon's code path in place (the engine's, where it runs it).
    HAS_AMX_BF16.store(amx_runtime::detect().amx_bf16, Ordering::Relaxed);
    CLOBBER_TILES.store(backend == Backend::Hardware, Ordering::Relaxed);

    let config = kernel_config();
    let mut tiles = configure_on(backend, &config).expect("configure");
    let alarm = Alarm::start(if trapped {
        TRAPPED_PERIOD_US
    } else {
        PERIOD_US
    });
    let (c, dots, signals) = run_kernel(&mut *tiles, dot, &c0, &pairs, Some(&alarm), None, pad);
    drop(alarm);
    drop(tiles);
    CLOBBER_TILES.store(false, Ordering::Relaxed);
    println!(
        "{backend} {dot:?}: {dots} dot products, {signals} signals delivered to the kernel's \
         thread ({} forwarded in total), handler work {:#x}",
        FORWARDED.load(Ordering::Relaxed),
        SINK.load(Ordering::Relaxed)
    );
    assert!(
        signals >= MIN_SIGNALS,
        "only {signals} signals arrived during the kernel ({dots} dot products): the test \
         proves nothing"
    );

    let expected = match dot {
        Dot::Int8 => int8_reference(&c0, &pairs, dots),
        Dot::Bf16 => {
            // The same sequence on a fresh emulator, without signals.
            let mut emu = Emulator::new();
            emu.ldtilecfg(config.as_bytes()).unwrap();
            run_kernel(&mut emu, dot, &c0, &pairs, None, Some(dots), Duration::ZERO).0
        }
    };
    assert!(c == expected, "{backend} {dot:?}: C differs from the reference after {dots} dot products and {signals} signals");
}

/// The silicon (or the trap engine where the CPU lacks AMX), or `None` after skipping the test.
fn hardware() -> Option<Backend> {
    let hw = amx_test_support::needs::silicon()?;
    if !amx_runtime::detect().amx_int8 {
        skip(Kind::Hardware, "needs AMX-INT8, which the CPU lacks");
        return None;
    }
    if TileConfig::from_bytes_for(&HANDLER_CONFIG, hw.palette_table()).is_err() {
        skip(
            Kind::Hardware,
            "needs palette 1 of 8 tiles of 16 x 64 bytes, and the CPU's is smaller",
        );
        return None;
    }
    Some(Backend::Hardware)
}

#[test]
fn int8_kernel_survives_signals_on_the_emulator() {
    check(Backend::Emulated, Dot::Int8);
}

#[test]
fn bf16_kernel_survives_signals_on_the_emulator() {
    check(Backend::Emulated, Dot::Bf16);
}

#[test]
fn int8_kernel_survives_signals_on_the_silicon() {
    if let Some(hw) = hardware() {
        check(hw, Dot::Int8);
    }
}

#[test]
fn bf16_kernel_survives_signals_on_the_silicon() {
    if let Some(hw) = hardware() {
        if !amx_runtime::detect().amx_bf16 {
            amx_test_support::skip!("needs AMX-BF16, which the CPU lacks");
        }
        check(hw, Dot::Bf16);
    }
}
