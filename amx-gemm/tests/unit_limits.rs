//! The GEMM asks the tile unit it runs on what it can do before it configures anything:
//!
//! - a unit whose TMUL limits are below the architectural ones (a CPU or VM reporting a smaller
//!   tmul_maxk / tmul_maxn in CPUID leaf 0x1E) gets a typed error, not a dot product the
//!   silicon would answer with #UD; modelled here by an emulator with those limits, whose
//!   checks the silicon path shares (`configs::check_limits`);
//! - no code outside the crate (a global allocator) runs while a tile configuration is held
//!   on a worker: the unchecked silicon path trusts the loaded configuration, and an allocator
//!   could load another one. The probe is an allocator that asks, on every allocation of the
//!   GEMM's thread, whether a tile guard is alive there.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use amx_gemm::reference::{self, Outputs};
use amx_gemm::{Backend, Bf16, Fp16, Gemm, GemmError, Int8, PackedB, Precision, Unsupported, U8S8};
use amx_runtime::{
    set_thread_emulator, tmul_limits_on, ConfigureError, Emulator, Palette, PaletteTable,
    TmulLimits,
};

thread_local! {
    /// Whether this thread's allocations load [`ATTACK`] through a second hardware unit.
    static ATTACKING: Cell<bool> = const { Cell::new(false) };
    /// Loads [`ATTACK`] made while a tile guard was alive on this thread.
    static ATTACKS: Cell<usize> = const { Cell::new(0) };
    /// Whether this thread's allocations are watched.
    static ARMED: Cell<bool> = const { Cell::new(false) };
    /// Allocations made while a tile guard was alive on this thread.
    static UNDER_GUARD: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, plus the probe.
struct Probe;

// SAFETY: every request is forwarded unchanged to the system allocator; the probe only reads
// and writes thread-locals that have no destructor and allocate nothing.
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.with(Cell::get) && tmul_limits_on(Backend::Emulated) == Err(ConfigureError::Busy) {
            UNDER_GUARD.with(|n| n.set(n.get() + 1));
        }
        // `replace(false)`: the attack itself may allocate; it must not recurse.
        if ATTACKING.with(|a| a.replace(false)) {
            // What a hostile (or merely careless) allocator can do through the safe API: load
            // a configuration of its own with a second hardware unit. The GEMM's guard is
            // `Busy` on this thread only for `configure`, not for a `Hardware` value.
            if let Ok(mut hw) = amx_runtime::Hardware::new() {
                use amx_runtime::TileUnit;
                if hw.ldtilecfg(ATTACK.as_bytes()).is_ok() {
                    ATTACKS.with(|n| n.set(n.get() + 1));
                }
            }
            ATTACKING.with(|a| a.set(true));
        }
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout (above).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Probe = Probe;

/// Every tile the largest the palette allows: loaded under an edge configuration, its stores
/// would write 16 rows of 64 bytes where the edge has fewer.
static ATTACK: amx_runtime::TileConfig = amx_runtime::tilecfg! {
    palette 1;
    t0: 16x64; t1: 16x64; t2: 16x64; t3: 16x64; t4: 16x64; t5: 16x64; t6: 16x64; t7: 16x64;
};

/// `m x n x k` of `P` on this thread's emulator: the result of the call, and C.
fn gemm<P: Precision>(m: usize, n: usize, k: usize) -> (Result<(), GemmError>, Vec<P::C>, bool)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let a = amx_test_support::random::<P::A>(m * k, 1);
    let b = amx_test_support::random::<P::B>(k * n, 2);
    let packed = PackedB::<P>::pack(&b, k, n, n).unwrap();
    let mut c = vec![P::C::default(); m * n];
    let ran = Gemm::new()
        .threads(1)
        .backend(Backend::Emulated)
        .run(m, &a, k, &packed, &mut c, n)
        .map(drop);
    let right = ran.is_ok()
        && reference::verify::<P>(m, n, k, &a, k, &b, n, None, &c, n, Outputs::All).is_ok();
    (ran, c, right)
}

/// Full micro-tiles only, edges only, and both.
const SHAPES: [(usize, usize, usize); 4] = [(64, 64, 128), (20, 31, 64), (40, 40, 96), (1, 7, 5)];

fn refused_under_small_limits<P: Precision>()
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let small = TmulLimits { maxk: 8, maxn: 32 };
    set_thread_emulator(Emulator::with_limits(PaletteTable::ARCHITECTURAL, small).unwrap())
        .unwrap();
    for (m, n, k) in SHAPES {
        let (ran, c, _) = gemm::<P>(m, n, k);
        match ran {
            Err(GemmError::Unsupported(why @ Unsupported::TmulLimits { limits, .. })) => {
                assert_eq!(limits, small);
                assert!(why.to_string().contains("TMUL"), "{why}");
            }
            other => panic!("{m}x{n}x{k} under tmul_maxk 8, tmul_maxn 32: {other:?}"),
        }
        // Refused before anything was written.
        assert!(
            c.iter().all(|x| *x == P::C::default()),
            "{m}x{n}x{k} wrote C"
        );
    }
    set_thread_emulator(Emulator::new()).unwrap();
    for (m, n, k) in SHAPES {
        let (ran, _, right) = gemm::<P>(m, n, k);
        assert!(
            ran.is_ok() && right,
            "{m}x{n}x{k} on the architectural limits: {ran:?}"
        );
    }
}

#[test]
fn small_tmul_limits_are_an_error_not_a_fault() {
    // A fresh thread, so that the emulator swap does not leak into other tests.
    std::thread::spawn(|| {
        refused_under_small_limits::<Int8>();
        refused_under_small_limits::<U8S8>();
        refused_under_small_limits::<Bf16>();
    })
    .join()
    .unwrap();
}

/// A unit whose palette 1 has `rows` rows of `bytes` bytes: the GEMM refuses it with a typed
/// error naming the palette, before it writes anything, whatever the shape.
fn refused_under_a_small_palette<P: Precision>(rows: u16, bytes: u16)
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    let small = Palette {
        max_rows: rows,
        bytes_per_row: bytes,
        ..Palette::PALETTE_1
    };
    let table = PaletteTable::one(small);
    set_thread_emulator(Emulator::with_limits(table, TmulLimits::ARCHITECTURAL).unwrap()).unwrap();
    for (m, n, k) in SHAPES {
        let (ran, c, _) = gemm::<P>(m, n, k);
        match ran {
            Err(GemmError::Unsupported(why @ Unsupported::Palette { palette, .. })) => {
                assert_eq!(palette, Some(small));
                assert!(why.to_string().contains("palette"), "{why}");
            }
            other => panic!("{m}x{n}x{k} under palette 1 of {rows}x{bytes}: {other:?}"),
        }
        assert!(
            c.iter().all(|v| *v == P::C::default()),
            "{m}x{n}x{k}: C written before the refusal"
        );
    }
    set_thread_emulator(Emulator::new()).unwrap();
}

#[test]
fn a_small_palette_is_an_error_naming_it() {
    std::thread::spawn(|| {
        refused_under_a_small_palette::<Int8>(8, 64);
        refused_under_a_small_palette::<Bf16>(16, 32);
        refused_under_a_small_palette::<U8S8>(1, 4);
    })
    .join()
    .unwrap();
}

/// Runs `P`'s GEMM at every shape on this thread, counting allocations under a tile guard.
fn nothing_allocated_under_a_guard<P: Precision>()
where
    P::A: amx_test_support::Random,
    P::B: amx_test_support::Random,
    P::C: amx_test_support::Random,
{
    for (m, n, k) in SHAPES
        .into_iter()
        .chain([(100, 70, 300), (33, 65, 1000), (128, 64, 256)])
    {
        UNDER_GUARD.with(|n| n.set(0));
        ARMED.with(|a| a.set(true));
        let (ran, _, right) = gemm::<P>(m, n, k);
        ARMED.with(|a| a.set(false));
        assert!(ran.is_ok() && right, "{m}x{n}x{k}: {ran:?}");
        let under = UNDER_GUARD.with(Cell::get);
        assert_eq!(
            under,
            0,
            "{}: {m}x{n}x{k}: {under} allocations under a tile guard",
            std::any::type_name::<P>()
        );
    }
}

/// The integer and floating-point products alike, one after the other on one thread: on the
/// AVX2 kernels the emulator's block kernel prepares operands of each, in room made before the
/// configuration, whatever the thread's calls before made. Where the CPU has AVX2 the test
/// also runs itself again with the kernels capped at it (`AMX_EMULATOR_KERNELS=avx2`).
#[test]
fn nothing_is_allocated_while_a_configuration_is_held() {
    // A fresh thread: its packed-A scratch (and the emulator's prepared operands, where its
    // kernels read them) is empty, so the GEMM must allocate it. Its emulator (the runtime's
    // own tile state, allocated on a thread's first `configure`) is put in place first: on the
    // silicon there is none.
    std::thread::spawn(|| {
        set_thread_emulator(Emulator::new()).unwrap();
        nothing_allocated_under_a_guard::<Int8>();
        nothing_allocated_under_a_guard::<Bf16>();
        nothing_allocated_under_a_guard::<U8S8>();
        nothing_allocated_under_a_guard::<Fp16>();
    })
    .join()
    .unwrap();
    // The kernels that prepare operands are the AVX2 ones, which a CPU with AVX-512 does not
    // pick by itself: this test again, in a process whose kernels are capped at AVX2.
    const CAP: &str = "AMX_EMULATOR_KERNELS";
    #[cfg(target_arch = "x86_64")]
    if std::env::var_os(CAP).is_none() && std::arch::is_x86_feature_detected!("avx2") {
        let exe = std::env::current_exe().expect("the test's path");
        let out = std::process::Command::new(exe)
            .args([
                "nothing_is_allocated_while_a_configuration_is_held",
                "--exact",
            ])
            .env(CAP, "avx2")
            .output()
            .expect("the test run again");
        assert!(
            out.status.success(),
            "capped at AVX2:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The silicon code path (natively, or under the trap engine where the CPU lacks AMX) with an
/// allocator that loads another configuration whenever it runs: the GEMM allocates nothing
/// under its configuration, so the attack never lands between a configure and the unchecked
/// instructions, and the results are right.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn an_allocator_that_reconfigures_cannot_reach_the_silicon_path() {
    if amx_test_support::needs::silicon().is_none() {
        return;
    }
    std::thread::spawn(|| {
        // Edges only, so every micro-kernel runs on the unchecked silicon path.
        for (m, n, k) in [(20, 31, 64), (9, 12, 70)] {
            let a = amx_test_support::random::<i8>(m * k, 1);
            let b = amx_test_support::random::<i8>(k * n, 2);
            let packed = PackedB::<Int8>::pack(&b, k, n, n).unwrap();
            // C exactly as large as it must be: a store of too many rows would run past it.
            let mut c = vec![0i32; m * n];
            ATTACKS.with(|n| n.set(0));
            ATTACKING.with(|a| a.set(true));
            let ran = Gemm::new()
                .threads(1)
                .backend(Backend::Hardware)
                .run(m, &a, k, &packed, &mut c, n);
            ATTACKING.with(|a| a.set(false));
            ran.unwrap();
            assert!(ATTACKS.with(Cell::get) > 0, "the attack never ran");
            reference::verify::<Int8>(m, n, k, &a, k, &b, n, None, &c, n, Outputs::All).unwrap();
        }
    })
    .join()
    .unwrap();
}
