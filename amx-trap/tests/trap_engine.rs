//! The trap engine on a CPU without AMX: raw AMX instructions (every encoding form of the
//! memory operand) give the emulator's results, and each exception reaches the program as the
//! silicon's would (docs/semantics.md section 1). Where the CPU has AMX itself, the engine does not
//! install and the tests say so and pass.
//!
//! Tests that need a process of their own (the program's own SIGILL handler installed before
//! the engine, the permission not yet requested, death by a signal) are `#[ignore]`d bodies
//! that the visible tests run in a child process of this test binary.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::sync::atomic::{AtomicI32, Ordering};

use amx_runtime::intrinsics::*;
use amx_runtime::{Emulator, TileUnit};
use amx_trap as trap;

mod trap_support;
use trap_support::*;

/// A palette-1 image with tiles (t, rows, colsb).
fn cfg(tiles: &[(u8, u8, u16)]) -> [u8; 64] {
    amx_test_support::image::image(1, 0, tiles)
}

/// This thread's tile `t` as the engine holds it (via the safe API's XSAVE replacement).
fn tile(t: u8) -> [u8; 1024] {
    let mut hw = amx_runtime::Hardware::new().expect("the engine is active");
    hw.resync();
    hw.tile_data(t).unwrap()
}

#[test]
fn intrinsics_give_the_emulators_results() {
    if !trap_engine() {
        return;
    }
    let image = cfg(&[(0, 16, 64), (1, 16, 64), (2, 16, 64), (3, 16, 64)]);
    let a = bytes(1, 1024);
    let b = bytes(2, 1024);
    let mut out = [vec![0u8; 1024], vec![0u8; 1024]];
    // SAFETY: the engine executes these; the operands are 16 x 64-byte buffers.
    unsafe {
        _tile_loadconfig(image.as_ptr());
        _tile_zero::<0>();
        _tile_loadd::<1>(a.as_ptr(), 64);
        _tile_stream_loadd::<2>(b.as_ptr(), 64);
        _tile_dpbssd::<0, 1, 2>();
        _tile_dpbsud::<0, 1, 2>();
        _tile_dpbusd::<0, 1, 2>();
        _tile_dpbuud::<0, 1, 2>();
        _tile_zero::<3>();
        _tile_dpbf16ps::<3, 1, 2>();
        _tile_stored::<0>(out[0].as_mut_ptr(), 64);
        _tile_stored::<3>(out[1].as_mut_ptr(), 64);
        _tile_release();
    }
    let mut emu = Emulator::new();
    emu.ldtilecfg(&image).unwrap();
    emu.tilezero(0).unwrap();
    emu.tileloadd(1, &a, 64).unwrap();
    emu.tileloaddt1(2, &b, 64).unwrap();
    emu.tdpbssd(0, 1, 2).unwrap();
    emu.tdpbsud(0, 1, 2).unwrap();
    emu.tdpbusd(0, 1, 2).unwrap();
    emu.tdpbuud(0, 1, 2).unwrap();
    emu.tilezero(3).unwrap();
    emu.tdpbf16ps(3, 1, 2).unwrap();
    let mut expect = [vec![0u8; 1024], vec![0u8; 1024]];
    emu.tilestored(0, &mut expect[0], 64).unwrap();
    emu.tilestored(3, &mut expect[1], 64).unwrap();
    assert_eq!(out, expect);
}

#[test]
fn every_memory_operand_form() {
    if !trap_engine() {
        return;
    }
    let src = bytes(3, 4096);
    let reference = |stride: usize, base: usize| -> [u8; 1024] {
        let mut t = [0u8; 1024];
        for r in 0..16 {
            let at = (base as isize + r as isize * stride as isize) as usize;
            t[r * 64..r * 64 + 64].copy_from_slice(&src[at..at + 64]);
        }
        t
    };
    // SAFETY: every row each instruction reads lies inside `src`; `dst` is 4 KiB.
    unsafe {
        // RIP-relative LDTILECFG.
        core::arch::asm!("ldtilecfg [rip + {cfg}]", cfg = sym CONFIG_16X64);
        // tileloadd tmm1, [r13 + r14*2 + 8]: VEX.X and VEX.B, scale 2, disp8.
        core::arch::asm!(
            ".byte 0xc4, 0x82, 0x7b, 0x4b, 0x4c, 0x75, 0x08",
            in("r13") src.as_ptr().wrapping_sub(8),
            in("r14") 64usize,
        );
    }
    assert_eq!(tile(1), reference(128, 0), "[r13 + r14*2 + 8]");
    let mut dst = vec![0u8; 4096];
    // SAFETY: as above.
    unsafe {
        // tilestored [r12 + rcx*1 + 0x100], tmm1: base r12 (VEX.B), disp32.
        core::arch::asm!(
            ".byte 0xc4, 0xc2, 0x7a, 0x4b, 0x8c, 0x0c, 0x00, 0x01, 0x00, 0x00",
            in("r12") dst.as_mut_ptr(),
            in("rcx") 192usize,
        );
    }
    let t1 = reference(128, 0);
    for r in 0..16 {
        let at = 0x100 + r * 192;
        assert_eq!(
            &dst[at..at + 64],
            &t1[r * 64..r * 64 + 64],
            "stored row {r}"
        );
    }
    // SAFETY: as above.
    unsafe {
        // tileloaddt1 tmm2, [rsp-free form: rax + no index]: SIB 0x20 (index 100, base rax).
        core::arch::asm!(".byte 0xc4, 0xe2, 0x79, 0x4b, 0x14, 0x20", in("rax") src.as_ptr().add(64));
    }
    assert_eq!(tile(2), reference(0, 64), "no index: stride 0");
    // SAFETY: as above; the negative stride walks down from row 0 at src + 3000.
    unsafe {
        _tile_loadd::<3>(src.as_ptr().add(3000), (-128isize) as usize);
    }
    let mut expect = [0u8; 1024];
    for r in 0..16 {
        let at = 3000 - r * 128;
        expect[r * 64..r * 64 + 64].copy_from_slice(&src[at..at + 64]);
    }
    assert_eq!(tile(3), expect, "negative stride");
    // SAFETY: TILERELEASE is legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn address_size_prefix_wraps_at_4_gib() {
    if !trap_engine() {
        return;
    }
    // SAFETY: a fresh anonymous mapping below 2 GiB, unmapped at the end.
    let low = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
            -1,
            0,
        )
    };
    assert_ne!(low, libc::MAP_FAILED);
    let data = bytes(4, 1024);
    // SAFETY: the mapping holds 4096 writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), low.cast::<u8>(), 1024) };
    // SAFETY: with the 67 prefix only the low 32 bits of rdi and rsi count: rows at `low`.
    unsafe {
        _tile_loadconfig(CONFIG_16X64.as_ptr());
        core::arch::asm!(
            ".byte 0x67, 0xc4, 0xe2, 0x7b, 0x4b, 0x24, 0x37",
            in("rdi") (low as u64) | 0xDEAD_0000_0000_0000,
            in("rsi") 64u64 | 0xBEEF_0000_0000,
        );
    }
    assert_eq!(tile(4)[..], data[..]);
    // SAFETY: the mapping made above.
    unsafe {
        _tile_release();
        libc::munmap(low, 4096);
    }
}

#[test]
fn threads_have_their_own_state_and_handler_scopes_see_init() {
    if !trap_engine() {
        return;
    }
    let image = cfg(&[(0, 2, 8)]);
    // SAFETY: a valid image.
    unsafe { _tile_loadconfig(image.as_ptr()) };
    // Another thread's configuration is its own. (What a new thread starts with differs from
    // the silicon here: without the preload's `pthread_create`, a thread of a program that
    // installed the engine itself starts unconfigured, where the silicon's has its creator's
    // configuration; README, "What it cannot do".)
    std::thread::spawn(|| {
        let mut out = [0xAAu8; 64];
        // SAFETY: a valid image; STTILECFG writes 64 bytes.
        unsafe {
            _tile_loadconfig(CONFIG_16X64.as_ptr());
            _tile_storeconfig(out.as_mut_ptr());
            _tile_release();
        }
        assert_eq!(out, CONFIG_16X64, "the thread's own configuration");
    })
    .join()
    .unwrap();
    let mut out = [0u8; 64];
    // SAFETY: as above.
    unsafe { _tile_storeconfig(out.as_mut_ptr()) };
    assert_eq!(
        out, image,
        "another thread's configuration left this one's alone"
    );
    {
        let _scope = trap::handler_scope();
        let mut out = [0xAAu8; 64];
        // SAFETY: as above.
        unsafe { _tile_storeconfig(out.as_mut_ptr()) };
        assert_eq!(out, [0; 64], "a handler scope starts from INIT");
        // SAFETY: a valid image, changed only inside the scope.
        unsafe { _tile_loadconfig(CONFIG_16X64.as_ptr()) };
    }
    let mut out = [0u8; 64];
    // SAFETY: as above.
    unsafe { _tile_storeconfig(out.as_mut_ptr()) };
    assert_eq!(out, image, "the state before the scope came back");
    // SAFETY: TILERELEASE is legal in any state.
    unsafe { _tile_release() };
}

/// A `fork` child keeps the permission and the tile configuration, and its tile data is zeros:
/// Linux copies a child's default XSAVE features, the configuration among them, and not the
/// tile data (docs/semantics.md X4).
#[test]
fn fork_keeps_the_configuration_and_permission_not_the_tile_data() {
    if !trap_engine() {
        return;
    }
    let image = cfg(&[(5, 4, 16)]);
    let data = bytes(5, 64);
    // SAFETY: a valid image and a 4 x 16 load from 64 bytes.
    unsafe {
        _tile_loadconfig(image.as_ptr());
        _tile_loadd::<5>(data.as_ptr(), 16);
    }
    // SAFETY: the child only runs trapped AMX instructions (async-signal-safe in the engine),
    // compares memory and _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut config = [0u8; 64];
        let mut out = [0xAAu8; 64];
        // SAFETY: a 64-byte image; a 4 x 16 store into 64 bytes.
        unsafe {
            _tile_storeconfig(config.as_mut_ptr());
            _tile_stored::<5>(out.as_mut_ptr(), 16);
        }
        let code = i32::from(config != image) | i32::from(out != [0; 64]) << 1;
        // SAFETY: ends the child.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "status {status:#x} (exit 1: the configuration differs, 2: the tile data is not zeros)"
    );
    let mut out = [0u8; 64];
    // SAFETY: a 4 x 16 store into 64 bytes.
    unsafe { _tile_stored::<5>(out.as_mut_ptr(), 16) };
    assert_eq!(out[..], data[..], "the parent's tile data is its own");
    // SAFETY: TILERELEASE is legal in any state.
    unsafe { _tile_release() };
}

#[test]
fn trapped_backend_choice_is_the_hardware_backend() {
    if !trap_engine() {
        return;
    }
    use amx_runtime::{Backend, BackendChoice};
    assert_eq!(
        BackendChoice::parse(" Trapped "),
        Ok(BackendChoice::Trapped)
    );
    assert_eq!(BackendChoice::Trapped.resolve(), Ok(Backend::Hardware));
}

#[test]
fn detect_reports_the_modelled_cpu() {
    if !trap_engine() {
        return;
    }
    let caps = amx_runtime::detect();
    assert!(caps.amx_tile && caps.amx_int8 && caps.amx_bf16, "{caps:?}");
    assert!(
        caps.xtilecfg_enabled() && caps.xtiledata_enabled(),
        "{caps:?}"
    );
    assert!(caps.is_usable(), "{:?}", caps.unavailable());
    assert_eq!(caps.palettes, amx_runtime::PaletteTable::ARCHITECTURAL);
    assert_eq!(
        amx_runtime::permit::permission_state(),
        amx_runtime::permit::PermissionState::Granted
    );
}

// ---------------------------------------------------------------------------------------------
// Faults, in child processes

#[test]
#[ignore = "run by faults_reach_the_programs_handlers in a child process"]
fn child_faults() {
    if !in_child() {
        return;
    }
    handle(libc::SIGILL);
    handle(libc::SIGSEGV);
    trap::install().unwrap();
    // XFD: tile data before the permission (TILEZERO of a used tile: C4 E2 7B 49 C0, 5 bytes).
    SKIP.store(5, Ordering::SeqCst);
    // SAFETY: the handler skips whatever faults.
    unsafe {
        _tile_loadconfig(CONFIG_16X64.as_ptr());
        _tile_zero::<0>();
    }
    let (sig, code, trapno, _, _, _) = seen();
    println!("xfd {sig} {code} {trapno}");
    amx_runtime::permit::request_permission().unwrap();
    // #UD: TILEZERO unconfigured, and a non-AMX ud2 (2 bytes) chained to the handler.
    // SAFETY: as above.
    unsafe {
        _tile_release();
        _tile_zero::<0>();
    }
    let (sig, code, trapno, addr, _, _) = seen();
    println!("ud {sig} {code} {trapno} {}", addr != 0);
    SKIP.store(2, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { core::arch::asm!("ud2") };
    let (sig, code, trapno, _, _, _) = seen();
    println!("ud2 {sig} {code} {trapno}");
    // #GP: a reserved byte set (LDTILECFG [rdi]: 5 bytes).
    let mut bad = CONFIG_16X64;
    bad[5] = 1;
    SKIP.store(5, Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { core::arch::asm!(".byte 0xc4, 0xe2, 0x78, 0x49, 0x07", in("rdi") bad.as_ptr()) };
    let (sig, code, trapno, addr, err, _) = seen();
    println!("gp {sig} {code} {trapno} {addr} {err}");
    // #PF: row 4 of a load lies in a PROT_NONE page; the handler unprotects it and retries,
    // and the load resumes at row 4 (T6).
    let pages = two_pages();
    let data = bytes(6, 8192);
    // SAFETY: the mapping holds 8192 writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), pages as *mut u8, 8192);
        libc::mprotect((pages + 4096) as *mut libc::c_void, 4096, libc::PROT_NONE);
    }
    UNPROTECT.store(pages + 4096, Ordering::SeqCst);
    SKIP.store(0, Ordering::SeqCst);
    // SAFETY: rows 0..4 at stride 1024 lie in the first page; the handler makes the second
    // readable before the retry.
    unsafe {
        _tile_loadconfig(CONFIG_16X64.as_ptr());
        core::arch::asm!(
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37",
            in("rdi") pages,
            in("rsi") 512usize,
        );
    }
    let (sig, code, trapno, addr, err, _) = seen();
    println!(
        "pf {sig} {code} {trapno} {} {err}",
        addr.wrapping_sub(pages as u64)
    );
    let mut expect = [0u8; 1024];
    for r in 0..16 {
        expect[r * 64..r * 64 + 64].copy_from_slice(&data[r * 512..r * 512 + 64]);
    }
    println!("resumed {}", tile(0) == expect);
    // An unmapped row (SEGV_MAPERR, a user read of an absent page), a read-only row written
    // (SEGV_ACCERR, a user write to a present page), a non-canonical base (#GP). Each is the
    // 6-byte [rdi + rsi*1] form, skipped by the handler.
    SKIP.store(6, Ordering::SeqCst);
    // SAFETY: unmaps the second page of the mapping above; remaps the first read-only.
    unsafe {
        libc::munmap((pages + 4096) as *mut libc::c_void, 4096);
        libc::mprotect(pages as *mut libc::c_void, 4096, libc::PROT_READ);
        core::arch::asm!(
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37",
            in("rdi") pages + 4096 - 64,
            in("rsi") 64usize,
        );
    }
    let (sig, code, trapno, addr, err, _) = seen();
    println!(
        "maperr {sig} {code} {trapno} {} {err}",
        addr.wrapping_sub(pages as u64)
    );
    // SAFETY: the handler skips the faulting store.
    unsafe {
        core::arch::asm!(
            ".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x37",
            in("rdi") pages,
            in("rsi") 64usize,
        );
    }
    let (sig, code, trapno, addr, err, _) = seen();
    println!(
        "store {sig} {code} {trapno} {} {err}",
        addr.wrapping_sub(pages as u64)
    );
    // SAFETY: as above.
    unsafe {
        core::arch::asm!(
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37",
            in("rdi") 0x8000_0000_0000_0000u64,
            in("rsi") 64usize,
        );
    }
    let (sig, code, trapno, addr, _, _) = seen();
    println!("noncanonical {sig} {code} {trapno} {addr}");
}

#[test]
fn faults_reach_the_programs_handlers() {
    if !trap_engine() {
        return;
    }
    let out = Child::new("child_faults").run();
    out.assert_passed();
    let lines: Vec<&str> = out.stdout.lines().collect();
    let has = |l: &str| assert!(lines.iter().any(|x| x.ends_with(l)), "no {l:?} in {out}");
    // docs/semantics.md section 1.
    has("xfd 4 1 0");
    has("ud 4 2 6 true");
    has("ud2 4 2 6");
    has("gp 11 128 13 0 0");
    // SEGV_ACCERR at the first byte of the protected page; the error code of a user read of a
    // page that is not present (Linux maps PROT_NONE pages not present), as the silicon reports
    // it.
    has("pf 11 2 14 4096 4");
    has("resumed true");
    // Row 1 of the load lies in the unmapped page: its first byte.
    has("maperr 11 1 14 4096 4");
    // The skipped load left start_row at 1, so the store begins with row 1 (T6, W3).
    has("store 11 2 14 64 7");
    has("noncanonical 11 128 13 0");
}

#[test]
#[ignore = "run by an_unhandled_fault_kills_with_its_signal in a child process"]
fn child_unhandled_gp() {
    if !in_child() {
        return;
    }
    // SAFETY: disables core dumps of this child.
    unsafe {
        libc::setrlimit(
            libc::RLIMIT_CORE,
            &libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            },
        )
    };
    trap::install().unwrap();
    let mut bad = CONFIG_16X64;
    bad[0] = 2;
    // SAFETY: the #GP is the point: no handler, so the process dies.
    unsafe { _tile_loadconfig(bad.as_ptr()) };
    println!("survived");
}

#[test]
fn an_unhandled_fault_kills_with_its_signal() {
    if !trap_engine() {
        return;
    }
    let out = Child::new("child_unhandled_gp").run();
    assert_eq!(out.signal(), Some(libc::SIGSEGV), "{out}");
}

/// Whether SIGUSR1 was blocked while [`once`] ran.
static MASKED: AtomicI32 = AtomicI32::new(-1);

extern "C" fn once(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the context of an SA_SIGINFO handler; pthread_sigmask only reads the current
    // mask into a live local.
    unsafe {
        let mut now: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
        MASKED.store(libc::sigismember(&now, libc::SIGUSR1), Ordering::SeqCst);
        let uc = &mut *ctx.cast::<libc::ucontext_t>();
        // Past the 5-byte TILEZERO.
        uc.uc_mcontext.gregs[libc::REG_RIP as usize] += 5;
    }
}

#[test]
#[ignore = "run by a_handler_gets_its_mask_and_resethand in a child process"]
fn child_resethand() {
    if !in_child() {
        return;
    }
    // SAFETY: disables core dumps; installs `once` for SIGILL with SIGUSR1 in its mask, reset
    // after one delivery (before the engine, which records it).
    unsafe {
        libc::setrlimit(
            libc::RLIMIT_CORE,
            &libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            },
        );
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = once as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESETHAND;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaddset(&mut sa.sa_mask, libc::SIGUSR1);
        libc::sigaction(libc::SIGILL, &sa, std::ptr::null_mut());
    }
    trap::install().unwrap();
    // SAFETY: TILEZERO with no configuration is #UD: the first goes to `once`, which skips it;
    // the second finds the default action and ends the process.
    unsafe { _tile_zero::<0>() };
    println!("handled once, masked {}", MASKED.load(Ordering::SeqCst));
    // SAFETY: as above.
    unsafe { _tile_zero::<1>() };
    println!("survived");
}

#[test]
fn a_handler_gets_its_mask_and_resethand() {
    if !trap_engine() {
        return;
    }
    let out = Child::new("child_resethand").run();
    assert!(out.stdout.contains("handled once, masked 1"), "{out}");
    assert!(!out.stdout.contains("survived"), "{out}");
    assert_eq!(out.signal(), Some(libc::SIGILL), "{out}");
}

/// A handler scope keeps `amx-runtime`'s tracked configuration in step with the engine's: a
/// configuration loaded inside the scope is not taken, after it, for the one the interrupted
/// code has. Before, the scope swapped the engine's unit only: `configure` after the scope
/// skipped its LDTILECFG (the tracked copy still said the scope's 1x4 tiles), and a checked
/// store of one 4-byte row executed with the outer 16x64 tile, writing 124 bytes.
#[test]
fn a_handler_scope_keeps_the_runtimes_tracked_configuration_in_step() {
    if !trap_engine() {
        return;
    }
    use amx_runtime::{configure, tilecfg, TileConfig};
    static BIG: TileConfig = tilecfg! { palette 1; t0: 16x64; t1: 16x64 };
    static SMALL: TileConfig = tilecfg! { palette 1; t0: 1x4; t1: 1x4 };
    std::thread::spawn(|| {
        let src = vec![0xABu8; 1024];
        {
            let mut t = configure(&BIG).unwrap();
            t.tileloadd(0, &src, 64).unwrap();
        }
        {
            let _scope = trap::handler_scope();
            let mut t = configure(&SMALL).unwrap();
            t.tilezero(1).unwrap();
        }
        // A row of 4 bytes, with room after it that a 16-row store would reach.
        let mut buf = vec![0u8; 4 + 1020];
        let mut t = configure(&SMALL).unwrap();
        t.tilestored(0, &mut buf[..4], 4).unwrap();
        assert!(
            buf[4..].iter().all(|&b| b == 0),
            "a 1x4 store wrote past its row"
        );
    })
    .join()
    .unwrap();
}

/// Handler scopes dropped out of order end the process with a message, rather than unlink the
/// engine's units wrongly (the scope dropped first unmapped the unit the other one puts back).
#[test]
fn handler_scopes_dropped_out_of_order_end_the_process() {
    const CHILD: &str = "AMX_TRAP_TEST_SCOPES_OUT_OF_ORDER";
    if std::env::var_os(CHILD).is_some() {
        let _ = trap::install();
        let a = trap::handler_scope();
        let b = trap::handler_scope();
        drop(a);
        drop(b);
        return;
    }
    let exe = std::env::current_exe().expect("the test's path");
    let out = std::process::Command::new(exe)
        .args([
            "handler_scopes_dropped_out_of_order_end_the_process",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .output()
        .expect("the test runs itself");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("reverse order"));
}

/// `Hardware::tile_data` on a thread that has run no AMX instruction reads the INIT state's
/// zeros, as XSAVE does on the silicon (it reported a missing XSAVE feature: the thread had no
/// engine state yet).
#[test]
fn tile_data_of_a_fresh_thread_is_zeros() {
    if !trap_engine() {
        return;
    }
    let zeros = std::thread::spawn(|| {
        let mut hw = amx_runtime::Hardware::new().expect("the engine's unit");
        hw.tile_data(0).map(|t| t.iter().all(|&b| b == 0))
    })
    .join()
    .unwrap();
    assert_eq!(zeros, Ok(true));
}

/// Typed tiles made inside a handler scope and used after it never pass their configuration
/// check by meeting their epoch again: the scope puts the interrupted code's epoch back, and
/// the changes after it take epochs never used on the thread. (Counting on from the epoch put
/// back, the second change after the scope met the typed tiles' epoch, and their unchecked
/// store ran under another configuration.)
#[test]
fn typed_tiles_from_a_handler_scope_never_match_a_later_configuration() {
    if !trap_engine() {
        return;
    }
    use amx_runtime::{configure_typed, tilecfg, TileConfig, TileUnit};
    tilecfg! {
        struct Small;
        palette 1;
        t0 as c: 1x4 i32;
    }
    static BIG: TileConfig = tilecfg! { palette 1; t0: 16x64; };
    static OTHER: TileConfig = tilecfg! { palette 1; t0: 16x60; };
    std::thread::spawn(|| {
        let mut hw = amx_runtime::Hardware::new().expect("the engine's unit");
        hw.ldtilecfg(BIG.as_bytes()).unwrap();
        let mut typed = {
            let _scope = trap::handler_scope();
            configure_typed::<Small>().unwrap()
        };
        // Two changes after the scope, through the unchecked-by-guard handle.
        hw.ldtilecfg(OTHER.as_bytes()).unwrap();
        hw.ldtilecfg(BIG.as_bytes()).unwrap();
        // One row of 4 i32, then room a 16-row store with that stride would reach.
        let mut out = vec![0i32; 4 + 1020];
        let stored = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = typed.store(Small::c, &mut out[..4], 4);
        }));
        assert!(
            stored.is_err(),
            "the typed store ran under another configuration"
        );
    })
    .join()
    .unwrap();
}
