//! The LDTILECFG, STTILECFG and TILERELEASE statements of docs/semantics.md (L1-L6, S1-S3, R1-R2)
//! on the silicon, through the safe [`Hardware`] API, cross-checked against the raw
//! instructions and the [`Emulator`].
//!
//! Every test runs on the silicon where the CPU has AMX, else on the trap engine (the same raw
//! instructions, each trapping to the emulator), and is skipped, with its reason shown, where
//! neither can run (except `probe_machinery_reports_signals`, which checks the test's own
//! fork-and-wait helper anywhere). Under the engine the signal frame holds no tile state, so L2
//! is checked there by resuming after the #GP and reading the configuration back.
//!
//! The safe API never executes an instruction that would fault, so a refusal it returns says
//! nothing about the silicon by itself. Where a statement is about a fault, the test also runs
//! the raw instruction in a forked child process (`on_silicon`) and checks that the child dies
//! of the signal Linux turns that exception into (docs/semantics.md section 1: #GP and #PF are
//! SIGSEGV, #UD is SIGILL): the safe API's `Fault::GeneralProtection` must match a SIGSEGV and
//! its `Fault::InvalidOpcode` a SIGILL, so the shared checks and the silicon agree.
//!
//! Not covered: L7 (LDTILECFG before the permission request; `Hardware::new` always requests
//! it first and the permission cannot be dropped again in this process) and L8 (NULL operands
//! and other ModRM encodings cannot be expressed through the safe API; the encodings are
//! checked by `hardware_encoding.rs`).
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use amx_runtime::intrinsics::*;
use amx_runtime::rules::image;
use amx_runtime::{Emulator, Fault, Hardware, TileShape, TileUnit, TILE_BYTES};
use amx_test_support::needs::silicon;
use amx_test_support::SplitMix64 as Rng;

// ---------------------------------------------------------------------------------------------
// Helpers

/// An emulator with the same palette table and TMUL limits as the silicon.
fn twin(hw: &Hardware) -> Emulator {
    Emulator::with_limits(*hw.palette_table(), hw.tmul_limits())
        .unwrap_or_else(|e| panic!("the emulator cannot model this CPU: {e}"))
}

/// A palette-1 image with the given (tile, rows, colsb) and start_row.
fn cfg(start_row: u8, tiles: &[(usize, u8, u16)]) -> [u8; 64] {
    let mut shapes = [None; 8];
    for &(t, rows, colsb) in tiles {
        shapes[t] = Some(TileShape::new(rows, colsb));
    }
    image::encode(1, start_row, &shapes)
}

/// Palette 1 with all eight tiles at 16 x 64.
fn full() -> [u8; 64] {
    // No allocation: this also runs in forked children.
    image::encode(1, 0, &[Some(TileShape::new(16, 64)); 8])
}

/// 1 KiB of nonzero bytes that differ per tile, as memory to load tile `t` from.
fn pattern(t: u8) -> Vec<u8> {
    (0..TILE_BYTES)
        .map(|i| (i as u8).wrapping_mul(31) ^ (t * 16 + 1))
        .collect()
}

/// Loads every tile of the full configuration from `pattern`, on the silicon and the twin.
fn fill_all(hw: &mut Hardware, emu: &mut Emulator) {
    for t in 0..8 {
        hw.tileloadd(t, &pattern(t), 64).unwrap();
        emu.tileloadd(t, &pattern(t), 64).unwrap();
    }
}

/// Asserts that the silicon and the twin hold the same configuration (real and tracked) and the
/// same tile data.
fn assert_same_state(hw: &mut Hardware, emu: &mut Emulator, what: &str) {
    assert_eq!(hw.sttilecfg(), emu.sttilecfg(), "{what}: STTILECFG differs");
    assert_eq!(
        hw.loaded_config(),
        emu.loaded_config(),
        "{what}: tracked config differs"
    );
    assert_eq!(
        hw.loaded_config(),
        hw.sttilecfg(),
        "{what}: tracked copy is stale"
    );
    for t in 0..8 {
        assert_eq!(
            hw.tile_data(t),
            emu.tile_data(t),
            "{what}: tile {t} differs"
        );
    }
}

fn is_gp<T>(r: &Result<T, Fault>) -> bool {
    matches!(r, Err(Fault::GeneralProtection(_)))
}

fn is_ud<T>(r: &Result<T, Fault>) -> bool {
    matches!(r, Err(Fault::InvalidOpcode(_)))
}

/// How a child process running raw instructions ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Ran to the end and exited 0.
    Completed,
    /// Exited with this nonzero code.
    Exited(i32),
    /// Killed by this signal.
    Killed(i32),
}

const SEGV: Outcome = Outcome::Killed(libc::SIGSEGV);
const ILL: Outcome = Outcome::Killed(libc::SIGILL);

/// Runs `child` in a forked copy of this process and reports how it ended: `child`'s return
/// value is the exit code, a fault kills the child with its signal. Core dumps are disabled in
/// the child. The child inherits the permission and (from this thread) the tile configuration,
/// but not the tile data; `child` should set up the state it needs itself.
fn on_silicon(child: impl FnOnce() -> i32) -> Outcome {
    // SAFETY: fork() in a multi-threaded process: the child runs only `child` (raw AMX
    // instructions and comparisons on memory that already exists), setrlimit and _exit, all of
    // which are async-signal-safe; it never returns into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: a plain system call on a valid struct.
        unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(99);
        // SAFETY: ends the child without running the parent's destructors or atexit handlers.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the child created above; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::Interrupted,
            "waitpid failed: {err}"
        );
    }
    if libc::WIFEXITED(status) {
        match libc::WEXITSTATUS(status) {
            0 => Outcome::Completed,
            code => Outcome::Exited(code),
        }
    } else if libc::WIFSIGNALED(status) {
        Outcome::Killed(libc::WTERMSIG(status))
    } else {
        panic!("child ended with status {status:#x}")
    }
}

/// What the SIGSEGV handler of [`ldtilecfg_fault_frame`] found.
mod frame {
    /// LDTILECFG completed: no fault.
    pub const NO_FAULT: i32 = 0;
    /// #GP (SI_KERNEL), and the signal frame's TILECFG equals the previous configuration.
    pub const GP_PREVIOUS_KEPT: i32 = 10;
    /// SIGSEGV, but not from #GP (si_code is not SI_KERNEL).
    pub const NOT_GP: i32 = 11;
    /// #GP, but the frame's TILECFG differs from the previous configuration.
    pub const CHANGED: i32 = 12;
    /// #GP, but the frame has no XSAVE image with TILECFG in it.
    pub const NO_XSAVE: i32 = 13;
}

/// The configuration the child's SIGSEGV handler expects to find in the signal frame.
static EXPECTED_TILECFG: [AtomicU8; 64] = [const { AtomicU8::new(0) }; 64];
/// CPUID.(0xD,17).EBX: where XSAVE (standard format) puts TILECFG.
static TILECFG_OFFSET: AtomicUsize = AtomicUsize::new(0);

/// Set by [`inspect_gp`] under the trap engine, which resumes after the #GP.
static TRAPPED_GP: AtomicBool = AtomicBool::new(false);

/// SIGSEGV handler: reads the XSAVE image of the signal frame and exits with a `frame` code
/// (under the trap engine: resumes after the instruction, see [`ldtilecfg_fault_frame`]).
extern "C" fn inspect_gp(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    const SI_KERNEL: i32 = 0x80;
    const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
    let exit = |code: i32| -> ! {
        // SAFETY: _exit is async-signal-safe; returning would re-run the faulting instruction.
        unsafe { libc::_exit(code) }
    };
    // SAFETY: the kernel passes a valid siginfo_t and ucontext_t to an SA_SIGINFO handler.
    let (code, fp) = unsafe {
        let uc = ctx as *const libc::ucontext_t;
        ((*info).si_code, (*uc).uc_mcontext.fpregs as *const u8)
    };
    if code != SI_KERNEL {
        exit(frame::NOT_GP);
    }
    if amx_trap::is_active() {
        // No tile state in the frame: resume after the instruction, and let the child read
        // the configuration back.
        // SAFETY: the context of an SA_SIGINFO handler; RIP points at the faulting
        // instruction, whose bytes are mapped readable.
        unsafe {
            let uc = &mut *(ctx as *mut libc::ucontext_t);
            let rip = uc.uc_mcontext.gregs[libc::REG_RIP as usize] as *const u8;
            let code = std::slice::from_raw_parts(rip, 15);
            match amx_runtime::rules::decode::decode(code) {
                amx_runtime::rules::decode::Decoded::Amx(i) => {
                    uc.uc_mcontext.gregs[libc::REG_RIP as usize] += i64::from(i.len);
                    TRAPPED_GP.store(true, Ordering::SeqCst);
                    return;
                }
                _ => exit(frame::NOT_GP),
            }
        }
    }
    if fp.is_null() {
        exit(frame::NO_XSAVE);
    }
    let offset = TILECFG_OFFSET.load(Ordering::Relaxed);
    // SAFETY: `fp` points at the frame's FXSAVE area; its software-reserved bytes (464..512)
    // say whether an XSAVE header (at 512) and `xstate_size` bytes follow. Every read below is
    // inside the area once those are checked.
    unsafe {
        let magic = fp.add(464).cast::<u32>().read_unaligned();
        let xfeatures = fp.add(472).cast::<u64>().read_unaligned();
        let size = fp.add(480).cast::<u32>().read_unaligned() as usize;
        if magic != FP_XSTATE_MAGIC1 || xfeatures & (1 << 17) == 0 || size < offset + 64 {
            exit(frame::NO_XSAVE);
        }
        let xstate_bv = fp.add(512).cast::<u64>().read_unaligned();
        if xstate_bv & (1 << 17) == 0 {
            exit(frame::CHANGED); // TILECFG in INIT state: the previous config is gone.
        }
        for (i, expected) in EXPECTED_TILECFG.iter().enumerate() {
            if *fp.add(offset + i) != expected.load(Ordering::Relaxed) {
                exit(frame::CHANGED);
            }
        }
    }
    exit(frame::GP_PREVIOUS_KEPT)
}

/// In a child: loads `previous`, then `image` with a SIGSEGV handler that inspects the signal
/// frame (docs/semantics.md L2 was measured the same way). Returns a `frame` code.
fn ldtilecfg_fault_frame(previous: &[u8; 64], image: &[u8; 64]) -> Outcome {
    on_silicon(|| {
        for (slot, byte) in EXPECTED_TILECFG.iter().zip(previous) {
            slot.store(*byte, Ordering::Relaxed);
        }
        #[allow(unused_unsafe)] // `__cpuid_count` is a safe function on newer toolchains.
        // SAFETY: CPUID only reads identification registers.
        let tilecfg = unsafe { core::arch::x86_64::__cpuid_count(0xD, 17) };
        TILECFG_OFFSET.store(tilecfg.ebx as usize, Ordering::Relaxed);
        // SAFETY: an all-zero sigaction is valid; the fields set are the handler and flags.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = inspect_gp as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        }
        // SAFETY: AMX is usable (the parent's `Hardware::new` succeeded); `previous` is a valid
        // image; `image` may fault, which is what the handler observes.
        unsafe {
            _tile_loadconfig(previous.as_ptr());
            _tile_loadconfig(image.as_ptr());
        }
        if TRAPPED_GP.load(Ordering::SeqCst) {
            let mut now = [0u8; 64];
            // SAFETY: STTILECFG writes 64 bytes.
            unsafe { _tile_storeconfig(now.as_mut_ptr()) };
            return if &now == previous {
                frame::GP_PREVIOUS_KEPT
            } else {
                frame::CHANGED
            };
        }
        frame::NO_FAULT
    })
}

/// In a child: LDTILECFG of `image`, then STTILECFG; exits 0 when STTILECFG shows `shown`.
fn ldtilecfg_then_sttilecfg(image: &[u8; 64], shown: &[u8; 64]) -> Outcome {
    on_silicon(|| {
        let mut out = [0xAAu8; 64];
        // SAFETY: AMX is usable; LDTILECFG may fault (the outcome the caller checks); `out` is
        // 64 writable bytes.
        unsafe {
            _tile_loadconfig(image.as_ptr());
            _tile_storeconfig(out.as_mut_ptr());
        }
        i32::from(&out != shown)
    })
}

// ---------------------------------------------------------------------------------------------
// L1 / L2

/// The #GP images of L1, each a change of [`full`].
fn gp_images() -> Vec<(String, [u8; 64])> {
    let mut out = Vec::new();
    let mut with = |what: String, change: &dyn Fn(&mut [u8; 64])| {
        let mut img = full();
        change(&mut img);
        out.push((what, img));
    };
    for i in 2..16 {
        with(format!("reserved byte {i} = 0x01"), &|img| img[i] = 0x01);
    }
    for i in 32..48 {
        with(format!("reserved byte {i} = 0x80"), &|img| img[i] = 0x80);
    }
    for i in 56..64 {
        with(format!("reserved byte {i} = 0x01"), &|img| img[i] = 0x01);
    }
    for p in [2u8, 3, 128, 255] {
        with(format!("palette {p}"), &|img| img[0] = p);
    }
    let colsb = |t: u8, v: u16| {
        move |img: &mut [u8; 64]| {
            img[image::colsb_offset(t)..image::colsb_offset(t) + 2]
                .copy_from_slice(&v.to_le_bytes())
        }
    };
    with("tile 0 colsb 65".into(), &colsb(0, 65));
    with("tile 7 colsb 65".into(), &colsb(7, 65));
    with("tile 2 colsb 0x100".into(), &colsb(2, 0x100));
    with("tile 2 colsb 0x140".into(), &colsb(2, 0x140));
    with("tile 5 rows 17".into(), &|img| {
        img[image::rows_offset(5)] = 17
    });
    with("tile 5 rows 255".into(), &|img| {
        img[image::rows_offset(5)] = 255
    });
    with("tile 4 rows 16, colsb 0".into(), &colsb(4, 0));
    with("tile 6 rows 0, colsb 64".into(), &|img| {
        img[image::rows_offset(6)] = 0
    });
    out
}

#[test]
fn l1_l2_each_gp_image_is_refused_and_keeps_the_previous_config() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut emu = twin(&hw);
    let previous = cfg(0, &[(0, 16, 64), (1, 8, 32), (2, 4, 12), (7, 1, 4)]);
    hw.ldtilecfg(&previous).unwrap();
    emu.ldtilecfg(&previous).unwrap();
    hw.tileloadd(1, &pattern(1), 32).unwrap();
    emu.tileloadd(1, &pattern(1), 32).unwrap();
    let data = hw.tile_data(1).unwrap();
    assert_ne!(data, [0; TILE_BYTES]);

    for (what, bad) in gp_images() {
        let r = hw.ldtilecfg(&bad);
        assert!(is_gp(&r), "{what}: expected #GP, got {r:?}");
        assert_eq!(r, emu.ldtilecfg(&bad), "{what}: emulator disagrees");
        // L2 as the safe API shows it: nothing changed, tile data included.
        assert_eq!(hw.loaded_config(), previous, "{what}");
        assert_eq!(hw.sttilecfg(), previous, "{what}");
        assert_eq!(hw.tile_data(1).unwrap(), data, "{what}");
        // L1 and L2 on the silicon: the raw LDTILECFG raises #GP and the signal frame still
        // holds the previous configuration.
        let silicon = ldtilecfg_fault_frame(&previous, &bad);
        assert_eq!(silicon, Outcome::Exited(frame::GP_PREVIOUS_KEPT), "{what}");
    }
    assert_same_state(&mut hw, &mut emu, "after the #GP images");
    hw.tilerelease();
}

// ---------------------------------------------------------------------------------------------
// L3 / S2 / S3

#[test]
fn l3_s2_accepted_images_load_verbatim() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut emu = twin(&hw);
    let mut images = vec![
        ("palette 1, every tile unused", cfg(0, &[])),
        ("one used tile among unused", cfg(0, &[(3, 16, 64)])),
        ("colsb 1", cfg(0, &[(0, 1, 1)])),
        ("colsb 6", cfg(0, &[(0, 3, 6)])),
        ("colsb 63", cfg(0, &[(0, 16, 63)])),
        ("all tiles 16 x 64", full()),
        (
            "mixed",
            cfg(9, &[(0, 2, 8), (2, 16, 64), (5, 7, 20), (7, 1, 4)]),
        ),
    ];
    let only_palette = amx_test_support::TileImage::palette(1).bytes();
    assert_eq!(images[0].1, only_palette, "L3: only byte 0 = 1");
    images.push(("start_row 255", cfg(255, &[(1, 16, 64)])));
    for (what, img) in images {
        // The silicon first (in a child, so that a wrong check cannot crash this process).
        assert_eq!(
            ldtilecfg_then_sttilecfg(&img, &img),
            Outcome::Completed,
            "{what}"
        );
        assert_eq!(hw.ldtilecfg(&img), Ok(()), "{what}");
        emu.ldtilecfg(&img).unwrap();
        assert_eq!(hw.sttilecfg(), img, "{what}: S2");
        assert_eq!(hw.loaded_config(), img, "{what}");
        assert_same_state(&mut hw, &mut emu, what);
    }
    hw.tilerelease();
}

#[test]
fn l3_s3_any_start_row_is_stored_and_kept() {
    let Some(mut hw) = silicon() else {
        return;
    };
    for start_row in 0..=255u8 {
        // Rows 2 and 16: most start_rows are at or past every tile's rows.
        let img = cfg(start_row, &[(0, 2, 8), (1, 16, 64)]);
        hw.ldtilecfg(&img).unwrap();
        let first = hw.sttilecfg();
        let second = hw.sttilecfg();
        assert_eq!(first, img, "start_row {start_row}: S2");
        assert_eq!(
            second, img,
            "start_row {start_row}: S3, STTILECFG keeps start_row"
        );
        assert_eq!(hw.loaded_config(), img, "start_row {start_row}");
    }
    hw.tilerelease();
}

// ---------------------------------------------------------------------------------------------
// L4

#[test]
fn l4_palette_0_ignores_every_other_byte() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut emu = twin(&hw);
    let mut garbage = Vec::new();
    let mut img = full();
    img[0] = 0;
    img[1] = 7;
    garbage.push(("16 x 64 tiles, start_row 7", img));
    let mut img = [0xFFu8; 64];
    img[0] = 0;
    garbage.push(("reserved 0xFF, colsb 0xFFFF, rows 255", img));
    let mut img: [u8; 64] = std::array::from_fn(|i| (i as u8).wrapping_mul(73).wrapping_add(5));
    img[0] = 0;
    garbage.push(("arbitrary bytes", img));
    for (what, img) in garbage {
        hw.ldtilecfg(&full()).unwrap();
        emu.ldtilecfg(&full()).unwrap();
        fill_all(&mut hw, &mut emu);
        assert_eq!(hw.ldtilecfg(&img), Ok(()), "{what}");
        emu.ldtilecfg(&img).unwrap();
        assert_eq!(hw.sttilecfg(), [0; 64], "{what}: INIT");
        assert_eq!(hw.loaded_config(), [0; 64], "{what}");
        for t in 0..8 {
            assert_eq!(
                hw.tile_data(t).unwrap(),
                [0; TILE_BYTES],
                "{what}: tile {t}"
            );
        }
        assert!(
            is_ud(&hw.tilezero(0)),
            "{what}: tile instructions #UD after palette 0"
        );
        assert_same_state(&mut hw, &mut emu, what);
        // The silicon: accepted, and TILEZERO then raises #UD.
        assert_eq!(
            ldtilecfg_then_sttilecfg(&img, &[0; 64]),
            Outcome::Completed,
            "{what}"
        );
        let zero_after = on_silicon(|| {
            // SAFETY: AMX is usable; palette 0 is accepted; TILEZERO is expected to fault.
            unsafe {
                _tile_loadconfig(full().as_ptr());
                _tile_loadconfig(img.as_ptr());
                _tile_zero::<0>();
            }
            0
        });
        assert_eq!(zero_after, ILL, "{what}: TILEZERO after palette 0");
    }
}

// ---------------------------------------------------------------------------------------------
// L5

#[test]
fn l5_ldtilecfg_zeroes_all_tile_data_even_with_the_same_config() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut emu = twin(&hw);
    hw.ldtilecfg(&full()).unwrap();
    emu.ldtilecfg(&full()).unwrap();
    fill_all(&mut hw, &mut emu);
    for t in 0..8u8 {
        assert_eq!(
            hw.tile_data(t).unwrap().to_vec(),
            pattern(t),
            "tile {t} as loaded"
        );
    }
    assert_same_state(&mut hw, &mut emu, "filled");

    // The identical configuration again.
    hw.ldtilecfg(&full()).unwrap();
    emu.ldtilecfg(&full()).unwrap();
    for t in 0..8 {
        assert_eq!(
            hw.tile_data(t).unwrap(),
            [0; TILE_BYTES],
            "tile {t} after the same config"
        );
    }
    assert_same_state(&mut hw, &mut emu, "same config again");

    // Another configuration.
    fill_all(&mut hw, &mut emu);
    let other = cfg(0, &[(0, 4, 8)]);
    hw.ldtilecfg(&other).unwrap();
    emu.ldtilecfg(&other).unwrap();
    for t in 0..8 {
        assert_eq!(
            hw.tile_data(t).unwrap(),
            [0; TILE_BYTES],
            "tile {t} after another config"
        );
    }
    assert_same_state(&mut hw, &mut emu, "another config");

    // tile_data shows the whole tile: a 4 x 8 load leaves rows 0-3, bytes 0-7 from memory and
    // every other byte zero (T3).
    hw.tileloadd(0, &pattern(0), 64).unwrap();
    emu.tileloadd(0, &pattern(0), 64).unwrap();
    let data = hw.tile_data(0).unwrap();
    for (i, byte) in data.iter().enumerate() {
        let (row, col) = (i / 64, i % 64);
        let expected = if row < 4 && col < 8 { pattern(0)[i] } else { 0 };
        assert_eq!(*byte, expected, "row {row}, byte {col}");
    }
    assert_same_state(&mut hw, &mut emu, "4 x 8 load");
    hw.tilerelease();
}

// ---------------------------------------------------------------------------------------------
// L6 / S4 / resync

#[test]
fn l6_misaligned_images_through_the_intrinsics_and_resync() {
    let Some(mut hw) = silicon() else {
        return;
    };
    hw.tilerelease(); // a known state: unconfigured, and the tracked copy says so
    #[repr(C, align(64))]
    struct Aligned([u8; 192]);
    let img = cfg(2, &[(0, 16, 64), (3, 5, 12)]);
    let mut buf = Aligned([0; 192]);
    buf.0[1..65].copy_from_slice(&img);
    let mut out = Aligned([0xAA; 192]);
    // SAFETY: AMX is usable; bytes 1..65 of `buf` hold an image this CPU accepts (it is a
    // palette-1 image the checks pass, as the safe load below confirms on the emulator), and
    // bytes 3..67 of `out` are writable.
    unsafe {
        _tile_loadconfig(buf.0.as_ptr().add(1));
        _tile_storeconfig(out.0.as_mut_ptr().add(3));
    }
    assert_eq!(out.0[3..67], img, "L6 / S4");
    assert!(
        out.0[..3].iter().chain(&out.0[67..]).all(|&b| b == 0xAA),
        "only 64 bytes written"
    );
    assert_eq!(
        hw.loaded_config(),
        [0; 64],
        "the tracked copy does not see raw intrinsics"
    );
    hw.resync();
    assert_eq!(
        hw.loaded_config(),
        img,
        "resync reads the real configuration"
    );
    assert_eq!(hw.tilezero(3), Ok(()));
    assert_eq!(hw.loaded_config()[1], 0, "TILEZERO clears start_row");
    assert_eq!(hw.sttilecfg()[1], 0);

    // SAFETY: AMX is usable; TILERELEASE is legal in any state.
    unsafe { _tile_release() };
    hw.resync();
    assert_eq!(hw.loaded_config(), [0; 64]);
    assert!(
        is_ud(&hw.tilezero(3)),
        "unconfigured after a raw TILERELEASE and resync"
    );
}

// ---------------------------------------------------------------------------------------------
// S1

#[test]
fn s1_unconfigured_sttilecfg_writes_64_zero_bytes() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut palette0 = full();
    palette0[0] = 0;
    for (what, unconfigure) in [("TILERELEASE", None), ("palette 0", Some(palette0))] {
        hw.ldtilecfg(&full()).unwrap();
        match unconfigure {
            None => hw.tilerelease(),
            Some(img) => hw.ldtilecfg(&img).unwrap(),
        }
        let mut out = [0xAAu8; 64];
        // SAFETY: AMX is usable; `out` is 64 writable bytes.
        unsafe { _tile_storeconfig(out.as_mut_ptr()) };
        assert_eq!(
            out, [0; 64],
            "after {what}: zeros over the previous contents"
        );
        assert_eq!(hw.sttilecfg(), [0; 64], "after {what}");
        assert_eq!(hw.loaded_config(), [0; 64], "after {what}");
    }
}

// ---------------------------------------------------------------------------------------------
// R1 / R2

#[test]
fn r1_tilerelease_returns_to_init_and_tile_instructions_fault() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut emu = twin(&hw);
    hw.ldtilecfg(&full()).unwrap();
    emu.ldtilecfg(&full()).unwrap();
    fill_all(&mut hw, &mut emu);
    hw.tilerelease();
    emu.tilerelease();
    assert_eq!(hw.sttilecfg(), [0; 64]);
    for t in 0..8 {
        assert_eq!(
            hw.tile_data(t).unwrap(),
            [0; TILE_BYTES],
            "tile {t} after TILERELEASE"
        );
    }
    assert_same_state(&mut hw, &mut emu, "released");

    let mut mem = pattern(0);
    let mut out = vec![0u8; TILE_BYTES];
    for op in RawOp::ALL {
        let (on_hw, on_emu) = match op {
            RawOp::Zero => (hw.tilezero(0), emu.tilezero(0)),
            RawOp::Load => (hw.tileloadd(0, &mem, 64), emu.tileloadd(0, &mem, 64)),
            RawOp::LoadT1 => (hw.tileloaddt1(0, &mem, 64), emu.tileloaddt1(0, &mem, 64)),
            RawOp::Store => (
                hw.tilestored(0, &mut out, 64),
                emu.tilestored(0, &mut mem, 64),
            ),
            RawOp::Dpbssd => (hw.tdpbssd(0, 1, 2), emu.tdpbssd(0, 1, 2)),
            RawOp::Dpbf16ps => (hw.tdpbf16ps(0, 1, 2), emu.tdpbf16ps(0, 1, 2)),
        };
        assert!(is_ud(&on_hw), "{op:?} after TILERELEASE: {on_hw:?}");
        assert_eq!(on_hw, on_emu, "{op:?}");
    }

    // The silicon raises #UD (SIGILL) for each.
    let src = pattern(0);
    let mut dst = vec![0u8; TILE_BYTES];
    for op in RawOp::ALL {
        let outcome = on_silicon(|| {
            // SAFETY: AMX is usable; a valid configuration is loaded and released; `op` is
            // expected to raise #UD before it touches memory, and `src` and `dst` hold the
            // 16 x 64 bytes it would touch anyway.
            unsafe {
                _tile_loadconfig(full().as_ptr());
                _tile_release();
                op.run(src.as_ptr(), dst.as_mut_ptr());
            }
            0
        });
        assert_eq!(outcome, ILL, "{op:?} after TILERELEASE on the silicon");
    }
}

/// The tile instructions R1 lists, on tile 0 (tiles 0, 1, 2 for the dot products).
#[derive(Clone, Copy, Debug)]
enum RawOp {
    Zero,
    Load,
    LoadT1,
    Store,
    Dpbssd,
    Dpbf16ps,
}

impl RawOp {
    const ALL: [RawOp; 6] = [
        RawOp::Zero,
        RawOp::Load,
        RawOp::LoadT1,
        RawOp::Store,
        RawOp::Dpbssd,
        RawOp::Dpbf16ps,
    ];

    /// Executes the raw instruction with stride 64.
    ///
    /// # Safety
    /// AMX is usable and the instruction's conditions hold, or it is expected to fault (in a
    /// child); `src` and `dst` are 1 KiB buffers, readable and writable respectively.
    unsafe fn run(self, src: *const u8, dst: *mut u8) {
        // SAFETY: forwarded from this function's contract.
        unsafe {
            match self {
                RawOp::Zero => _tile_zero::<0>(),
                RawOp::Load => _tile_loadd::<0>(src, 64),
                RawOp::LoadT1 => _tile_stream_loadd::<0>(src, 64),
                RawOp::Store => _tile_stored::<0>(dst, 64),
                RawOp::Dpbssd => _tile_dpbssd::<0, 1, 2>(),
                RawOp::Dpbf16ps => _tile_dpbf16ps::<0, 1, 2>(),
            }
        }
    }
}

#[test]
fn r2_tilerelease_while_unconfigured_is_fine() {
    let Some(mut hw) = silicon() else {
        return;
    };
    hw.tilerelease();
    hw.tilerelease();
    assert_eq!(hw.sttilecfg(), [0; 64]);
    let twice = on_silicon(|| {
        // SAFETY: AMX is usable; TILERELEASE is legal in any state (R2).
        unsafe {
            _tile_release();
            _tile_release();
        }
        0
    });
    assert_eq!(twice, Outcome::Completed);
}

// ---------------------------------------------------------------------------------------------
// The tracked copy follows the silicon's start_row

#[test]
fn tracked_start_row_is_cleared_as_the_silicon_clears_it() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let img = cfg(3, &[(0, 16, 64), (1, 16, 64), (2, 16, 64)]);
    let mem = pattern(1);
    let mut out = vec![0u8; TILE_BYTES];
    type Op<'a> = Box<dyn FnMut(&mut Hardware) -> Result<(), Fault> + 'a>;
    let ops: Vec<(&str, Op)> = vec![
        ("TILEZERO", Box::new(|hw| hw.tilezero(0))),
        ("TILELOADD", Box::new(|hw| hw.tileloadd(0, &mem, 64))),
        ("TILELOADDT1", Box::new(|hw| hw.tileloaddt1(0, &mem, 64))),
        ("TILESTORED", Box::new(|hw| hw.tilestored(0, &mut out, 64))),
        ("TDPBSSD", Box::new(|hw| hw.tdpbssd(0, 1, 2))),
        ("TDPBUUD", Box::new(|hw| hw.tdpbuud(0, 1, 2))),
        ("TDPBF16PS", Box::new(|hw| hw.tdpbf16ps(0, 1, 2))),
    ];
    for (what, mut op) in ops {
        hw.ldtilecfg(&img).unwrap();
        assert_eq!(hw.loaded_config()[1], 3);
        assert_eq!(op(&mut hw), Ok(()), "{what}");
        assert_eq!(hw.loaded_config()[1], 0, "{what}: tracked start_row");
        assert_eq!(
            hw.sttilecfg(),
            hw.loaded_config(),
            "{what}: tracked vs STTILECFG"
        );
    }
    hw.tilerelease();
}

// ---------------------------------------------------------------------------------------------
// TDPFP16PS

#[test]
fn tdpfp16ps_needs_cpuid_or_an_explicit_opt_in() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut emu = twin(&hw);
    let img = cfg(0, &[(0, 16, 64), (1, 16, 64), (2, 16, 64)]);
    hw.ldtilecfg(&img).unwrap();
    emu.ldtilecfg(&img).unwrap();
    for t in 0..3 {
        hw.tileloadd(t, &pattern(t), 64).unwrap();
        emu.tileloadd(t, &pattern(t), 64).unwrap();
    }
    if !hw.amx_fp16() {
        assert_eq!(
            hw.tdpfp16ps(0, 1, 2),
            Err(Fault::InvalidOpcode(amx_runtime::InvalidOpcode::new(
                amx_runtime::Mnemonic::DotProduct(amx_runtime::rules::DotKind::Tdpfp16ps),
                amx_runtime::UdReason::MissingFeature(amx_runtime::Feature::AmxFp16)
            )))
        );
        assert_same_state(&mut hw, &mut emu, "refused TDPFP16PS");
        // Does this core execute it anyway (docs/semantics.md F1)? Ask a child.
        let probe = on_silicon(|| {
            // SAFETY: AMX is usable; `img` fits TDPFP16PS on tiles 0, 1, 2; the instruction may
            // raise #UD on a core without AMX-FP16, which is what this probes.
            unsafe {
                _tile_loadconfig(img.as_ptr());
                _tile_dpfp16ps::<0, 1, 2>();
            }
            0
        });
        if probe != Outcome::Completed {
            assert_eq!(probe, ILL, "TDPFP16PS without AMX-FP16");
            amx_test_support::skip(
                amx_test_support::Kind::NotApplicable,
                "its TDPFP16PS part needs AMX-FP16 (Granite Rapids and later), and this core \
                 does not execute it",
            );
            hw.tilerelease();
            return;
        }
        // SAFETY: the probe just executed TDPFP16PS on this CPU (a homogeneous server).
        unsafe { hw.assume_amx_fp16() };
        assert!(hw.amx_fp16());
    }
    assert_eq!(hw.tdpfp16ps(0, 1, 2), Ok(()));
    emu.tdpfp16ps(0, 1, 2).unwrap();
    assert_same_state(&mut hw, &mut emu, "TDPFP16PS");
    hw.tilerelease();
}

// ---------------------------------------------------------------------------------------------
// Random images: the shared checks, the emulator and the silicon agree

/// The next random byte of `rng`.
fn byte(rng: &mut Rng) -> u8 {
    rng.next_u64() as u8
}

/// A random image, biased towards valid ones and towards one or two broken rules.
fn random_image(rng: &mut Rng) -> [u8; 64] {
    if rng.chance(5) {
        return std::array::from_fn(|_| byte(rng));
    }
    let mut img = [0u8; 64];
    if rng.chance(5) {
        for b in img.iter_mut().skip(1) {
            *b = byte(rng);
        }
        return img; // palette 0 with arbitrary bytes
    }
    img[0] = 1;
    img[1] = if rng.chance(70) { 0 } else { byte(rng) };
    for t in 0..8 {
        if rng.chance(30) {
            continue;
        }
        let rows = 1 + rng.below(16) as u8;
        let colsb = if rng.chance(60) {
            4 * (1 + rng.below(16) as u16)
        } else {
            1 + rng.below(64) as u16
        };
        img[image::rows_offset(t)] = rows;
        img[image::colsb_offset(t)..image::colsb_offset(t) + 2]
            .copy_from_slice(&colsb.to_le_bytes());
    }
    let mutations = [0, 0, 1, 1, 2][rng.below(5) as usize];
    for _ in 0..mutations {
        let t = rng.below(8) as u8;
        match rng.below(10) {
            0 => {
                let reserved = [2..16, 32..48, 56..64][rng.below(3) as usize].clone();
                let i = reserved.start + rng.below(reserved.len() as u64) as usize;
                img[i] = 1 + rng.below(255) as u8;
            }
            1 => img[0] = [2, 3, 4, 7, 8, 128, 255, byte(rng)][rng.below(8) as usize],
            2 => {
                let colsb: u16 = [0, 63, 64, 65, 0x100, 0x140, 0xFFFF][rng.below(7) as usize];
                img[image::colsb_offset(t)..image::colsb_offset(t) + 2]
                    .copy_from_slice(&colsb.to_le_bytes());
            }
            3 => img[image::colsb_offset(t) + 1] = byte(rng),
            4 => img[image::rows_offset(t)] = [0, 15, 16, 17, 255][rng.below(5) as usize],
            5 => img[image::rows_offset(t)] = byte(rng),
            6 => img[1] = byte(rng),
            7 => img[image::rows_offset(t)] = 0,
            8 => {
                img[image::colsb_offset(t)] = 0;
                img[image::colsb_offset(t) + 1] = 0;
            }
            _ => img[rng.below(64) as usize] = byte(rng),
        }
    }
    img
}

#[test]
fn random_images_agree_between_checks_emulator_and_silicon() {
    let Some(mut hw) = silicon() else {
        return;
    };
    let mut emu = twin(&hw);
    let mut rng = Rng::new(0x414D_5831_5345_4544); // "AMX1SEED"
    let (mut accepted, mut refused) = (0, 0);
    for n in 0..2048 {
        let img = random_image(&mut rng);
        let expected = emu.ldtilecfg(&img);
        // The silicon decides first, in a child, so a disagreement fails instead of crashing.
        let silicon = on_silicon(|| {
            // SAFETY: AMX is usable; LDTILECFG may raise #GP, which is the outcome measured.
            unsafe { _tile_loadconfig(img.as_ptr()) };
            0
        });
        match (&expected, silicon) {
            (Ok(()), Outcome::Completed) => accepted += 1,
            (Err(Fault::GeneralProtection(_)), SEGV) => refused += 1,
            _ => {
                panic!("image {n} {img:02x?}: the checks say {expected:?}, the silicon {silicon:?}")
            }
        }
        assert_eq!(hw.ldtilecfg(&img), expected, "image {n} {img:02x?}");
        assert_eq!(hw.sttilecfg(), emu.sttilecfg(), "image {n} {img:02x?}");
        assert_eq!(
            hw.loaded_config(),
            emu.loaded_config(),
            "image {n} {img:02x?}"
        );
    }
    println!("{accepted} images accepted, {refused} refused by both");
    assert!(
        accepted > 200 && refused > 200,
        "the generator should exercise both sides"
    );
    hw.tilerelease();
}

// ---------------------------------------------------------------------------------------------
// The helper itself

#[test]
fn probe_machinery_reports_signals() {
    // Runs everywhere: checks that `on_silicon` tells exits, SIGILL and SIGSEGV apart.
    assert_eq!(on_silicon(|| 0), Outcome::Completed);
    assert_eq!(on_silicon(|| 7), Outcome::Exited(7));
    let ud = on_silicon(|| {
        // SAFETY: UD2 raises #UD in the child, which dies of SIGILL.
        unsafe { core::arch::asm!("ud2", options(noreturn)) }
    });
    assert_eq!(ud, ILL);
    let gp = on_silicon(|| {
        // SAFETY: a load from a non-canonical address raises #GP(0) in the child, which dies
        // of SIGSEGV; nothing is read.
        unsafe {
            core::arch::asm!(
                "mov {tmp}, qword ptr [{addr}]",
                addr = in(reg) 0x8000_0000_0000_0000u64,
                tmp = out(reg) _,
                options(nostack, readonly)
            )
        };
        0
    });
    assert_eq!(gp, SEGV);
}

/// `tile_data` (XSAVE of the tile state) on a fresh thread that has loaded a configuration but
/// never touched tile data: the OS has not yet given the thread tile-data state (XFD still
/// armed), XSAVE must not trap, and the tiles read as zeros (X1: tile data INIT after LDTILECFG).
#[test]
fn tile_data_on_a_fresh_thread_reads_zeros() {
    if silicon().is_none() {
        return;
    }
    std::thread::spawn(|| {
        let mut hw = Hardware::new().unwrap();
        hw.ldtilecfg(&full()).unwrap();
        for t in 0..8 {
            match hw.tile_data(t) {
                Ok(data) => assert!(data.iter().all(|&b| b == 0), "tile {t} is not zero"),
                // An OS that does not describe the tile state to XSAVE is reported, not faulted.
                Err(Fault::InvalidOpcode(why)) => {
                    println!("tile_data unavailable on this OS: {why}");
                    return;
                }
                Err(other) => panic!("tile {t}: {other}"),
            }
        }
        hw.tilerelease();
    })
    .join()
    .unwrap();
}
