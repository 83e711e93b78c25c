//! Patched sites of the trap engine (repeat executions through a stub instead of a signal):
//! the results are the emulator's and bit-identical to an unpatched run (`AMX_TRAP_PATCH=0`),
//! a fault on a patched site reaches the program's handler at the site with the silicon's
//! signal and registers, and a site executed by two threads while it is being patched works.
//!
//! Where the CPU has AMX itself the engine does not install and the tests say so and pass.
//! Bodies that need a process of their own are `#[ignore]`d and run in a child process.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::sync::atomic::Ordering;

use amx_runtime::intrinsics::*;
use amx_runtime::{Emulator, TileUnit};
use amx_trap as trap;

mod trap_support;
use trap_support::*;

/// One round of every instruction kind on the silicon code path (the engine): its stored
/// tiles.
#[inline(never)]
fn round_on_engine(a: &[u8], b: &[u8]) -> [Vec<u8>; 3] {
    let mut out = [vec![0u8; 1024], vec![0u8; 1024], vec![0u8; 64]];
    // SAFETY: the engine executes these; the operands are 16 x 64-byte buffers and a 64-byte
    // configuration image.
    unsafe {
        _tile_loadconfig(CONFIG_16X64.as_ptr());
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
        _tile_storeconfig(out[2].as_mut_ptr());
        _tile_release();
    }
    out
}

fn round_on_emulator(a: &[u8], b: &[u8]) -> [Vec<u8>; 3] {
    let mut emu = Emulator::new();
    emu.ldtilecfg(&CONFIG_16X64).unwrap();
    emu.tilezero(0).unwrap();
    emu.tileloadd(1, a, 64).unwrap();
    emu.tileloaddt1(2, b, 64).unwrap();
    emu.tdpbssd(0, 1, 2).unwrap();
    emu.tdpbsud(0, 1, 2).unwrap();
    emu.tdpbusd(0, 1, 2).unwrap();
    emu.tdpbuud(0, 1, 2).unwrap();
    emu.tilezero(3).unwrap();
    emu.tdpbf16ps(3, 1, 2).unwrap();
    let mut out = [vec![0u8; 1024], vec![0u8; 1024], vec![0u8; 64]];
    emu.tilestored(0, &mut out[0], 64).unwrap();
    emu.tilestored(3, &mut out[1], 64).unwrap();
    out[2].copy_from_slice(&emu.sttilecfg());
    out
}

/// FNV-1a over every stored byte of `rounds` rounds, checking each against the emulator.
fn workload(rounds: u32) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for r in 0..rounds {
        let a = bytes(u64::from(2 * r + 1), 1024);
        let b = bytes(u64::from(2 * r + 2), 1024);
        let got = round_on_engine(&a, &b);
        assert_eq!(got, round_on_emulator(&a, &b), "round {r}");
        for byte in got.iter().flatten() {
            h = (h ^ u64::from(*byte)).wrapping_mul(0x100_0000_01B3);
        }
    }
    h
}

#[test]
#[ignore = "run by patched_and_unpatched_give_identical_results in a child process"]
fn child_workload() {
    if !in_child() {
        return;
    }
    trap::install().unwrap();
    amx_runtime::permit::request_permission().unwrap();
    let h = workload(40);
    println!(
        "digest {h:016x} patching {} sites {}",
        trap::patching(),
        trap::patched_sites()
    );
}

#[test]
fn patched_and_unpatched_give_identical_results() {
    if !trap_engine() {
        return;
    }
    let on = Child::new("child_workload").run();
    let off = Child::new("child_workload")
        .env("AMX_TRAP_PATCH", "0")
        .run();
    on.assert_passed();
    off.assert_passed();
    let line = |out: &str| -> Vec<String> {
        let at = out
            .find("digest ")
            .unwrap_or_else(|| panic!("no digest in {out}"));
        out[at..]
            .lines()
            .next()
            .unwrap_or_default()
            .split(' ')
            .map(str::to_owned)
            .collect()
    };
    let (on, off) = (line(&on.stdout), line(&off.stdout));
    assert_eq!(on[1], off[1], "patched {on:?} and unpatched {off:?} differ");
    assert_eq!(
        off[3], "false",
        "AMX_TRAP_PATCH=0 turns patching off: {off:?}"
    );
    assert_eq!(off[5], "0", "no site patched with patching off: {off:?}");
    if on[3] == "true" {
        // Every instruction of the round ran at least 40 times: all of them are patched.
        let sites: usize = on[5].parse().unwrap();
        assert!(sites >= 14, "only {sites} sites patched: {on:?}");
    } else {
        println!("patching unavailable here: only the unpatched path was compared");
    }
}

/// TILELOADD tmm0, [rdi + rsi]: one site; returns its address.
#[inline(never)]
fn load_site(base: usize, stride: usize) -> u64 {
    let site: u64;
    // SAFETY: the caller's operand rows are readable, or its handler deals with the fault.
    unsafe {
        core::arch::asm!(
            "lea {site}, [rip + 2f]",
            "2:",
            ".byte 0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37",
            site = out(reg) site,
            in("rdi") base,
            in("rsi") stride,
        );
    }
    site
}

/// TILESTORED [rdi + rsi], tmm0: one site; returns its address.
#[inline(never)]
fn store_site(base: usize, stride: usize) -> u64 {
    let site: u64;
    // SAFETY: as in `load_site`, for writes.
    unsafe {
        core::arch::asm!(
            "lea {site}, [rip + 2f]",
            "2:",
            ".byte 0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x37",
            site = out(reg) site,
            in("rdi") base,
            in("rsi") stride,
        );
    }
    site
}

/// TILEZERO tmm0: one site; returns its address.
#[inline(never)]
fn zero_site() -> u64 {
    let site: u64;
    // SAFETY: the handler deals with a #UD.
    unsafe {
        core::arch::asm!(
            "lea {site}, [rip + 2f]",
            "2:",
            ".byte 0xc4, 0xe2, 0x7b, 0x49, 0xc0",
            site = out(reg) site,
        );
    }
    site
}

fn tile0() -> [u8; 1024] {
    let mut hw = amx_runtime::Hardware::new().expect("the engine is active");
    hw.resync();
    hw.tile_data(0).unwrap()
}

#[test]
#[ignore = "run by faults_on_patched_sites_reach_the_handler_at_the_site in a child process"]
fn child_fast_path_faults() {
    if !in_child() {
        return;
    }
    handle(libc::SIGILL);
    handle(libc::SIGSEGV);
    trap::install().unwrap();
    amx_runtime::permit::request_permission().unwrap();
    let pages = two_pages();
    let data = bytes(6, 8192);
    // SAFETY: the mapping holds 8192 writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), pages as *mut u8, 8192) };
    // SAFETY: a valid configuration image.
    unsafe { _tile_loadconfig(CONFIG_16X64.as_ptr()) };
    // Hot: the sites get patched (rows at stride 512 span both pages).
    let mut load = 0;
    let mut store = 0;
    let mut zero = 0;
    for _ in 0..10 {
        load = load_site(pages, 512);
        store = store_site(pages, 512);
        zero = zero_site();
    }
    // SAFETY: the sites' first bytes, readable code.
    let first = |site: u64| unsafe { *(site as *const u8) };
    println!(
        "patched {} {} {} {}",
        trap::patching(),
        first(load) == 0xE9,
        first(store) == 0xE9,
        first(zero) == 0xE9
    );
    // #PF on a load: row 8 lies in a PROT_NONE page; the handler unprotects it and retries,
    // and the load resumes at row 8.
    let mut expect = [0u8; 1024];
    for r in 0..16 {
        expect[r * 64..r * 64 + 64].copy_from_slice(&data[r * 512..r * 512 + 64]);
    }
    // SAFETY: the second page of our mapping.
    unsafe { libc::mprotect((pages + 4096) as *mut libc::c_void, 4096, libc::PROT_NONE) };
    UNPROTECT.store(pages + 4096, Ordering::SeqCst);
    SKIP.store(0, Ordering::SeqCst);
    load_site(pages, 512);
    let (sig, code, trapno, addr, err, rip) = seen();
    println!(
        "load-pf {sig} {code} {trapno} {} {err} {} {}",
        addr.wrapping_sub(pages as u64),
        rip == load,
        SEEN_RSI.load(Ordering::SeqCst)
    );
    println!("resumed {}", tile0() == expect);
    // #PF on a store: the second page read-only.
    // SAFETY: as above.
    unsafe { libc::mprotect((pages + 4096) as *mut libc::c_void, 4096, libc::PROT_READ) };
    UNPROTECT.store(pages + 4096, Ordering::SeqCst);
    // SAFETY: the first page is ours and writable.
    unsafe { std::ptr::write_bytes(pages as *mut u8, 0, 4096) };
    store_site(pages, 512);
    let (sig, code, trapno, addr, err, rip) = seen();
    println!(
        "store-pf {sig} {code} {trapno} {} {err} {}",
        addr.wrapping_sub(pages as u64),
        rip == store
    );
    // SAFETY: both pages are readable now.
    let stored = unsafe { std::slice::from_raw_parts(pages as *const u8, 8192) };
    let all = (0..16).all(|r| stored[r * 512..r * 512 + 64] == expect[r * 64..r * 64 + 64]);
    println!("stored {all}");
    // #UD on a patched TILEZERO: no configuration; the handler skips the 5 bytes.
    // SAFETY: the handler skips the faulting instruction.
    unsafe { _tile_release() };
    SKIP.store(5, Ordering::SeqCst);
    zero_site();
    let (sig, code, trapno, _, _, rip) = seen();
    println!("zero-ud {sig} {code} {trapno} {}", rip == zero);
}

#[test]
fn faults_on_patched_sites_reach_the_handler_at_the_site() {
    if !trap_engine() {
        return;
    }
    let out = Child::new("child_fast_path_faults").run();
    println!("{out}");
    out.assert_passed();
    let lines: Vec<&str> = out.stdout.lines().collect();
    let has = |l: &str| assert!(lines.iter().any(|x| x.ends_with(l)), "no {l:?} in {out}");
    if lines
        .iter()
        .any(|l| l.ends_with("patched true true true true"))
    {
        // SEGV_ACCERR at the first byte of the protected page (row 8), the error code of a
        // user read of a page that is not present (PROT_NONE), RIP at the site, the registers
        // the instruction saw.
        has("load-pf 11 2 14 4096 4 true 512");
        has("resumed true");
        // A user write.
        has("store-pf 11 2 14 4096 7 true");
        has("stored true");
        // SIGILL, ILL_ILLOPN, #UD.
        has("zero-ud 4 2 6 true");
    } else {
        assert!(
            lines.iter().any(|l| l.contains("patched false")),
            "patching on, but not every hot site patched: {out}"
        );
        println!("patching unavailable here: {out}");
    }
}

/// Machine code at a fresh address: TILELOADD tmm0, [rdi + rsi]; TILESTORED [rdx + rsi],
/// tmm0; ret. A new site each call (never unmapped, so addresses are not reused).
fn fresh_copy_routine() -> extern "C" fn(*const u8, usize, *mut u8) {
    let code: [u8; 13] = [
        0xc4, 0xe2, 0x7b, 0x4b, 0x04, 0x37, // tileloadd tmm0, [rdi + rsi]
        0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x32, // tilestored [rdx + rsi], tmm0
        0xc3, // ret
    ];
    // SAFETY: a fresh private anonymous page, filled, then made read+execute.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        std::ptr::copy_nonoverlapping(code.as_ptr(), p.cast::<u8>(), code.len());
        assert_eq!(
            libc::mprotect(p, 4096, libc::PROT_READ | libc::PROT_EXEC),
            0
        );
        std::mem::transmute::<*mut libc::c_void, extern "C" fn(*const u8, usize, *mut u8)>(p)
    }
}

#[test]
fn two_threads_on_sites_being_patched() {
    if !trap_engine() {
        return;
    }
    // Each round a new routine (two new sites) that both threads run at once, so the patching
    // of each site happens while the other thread executes it.
    let rounds = 150;
    let calls = 20;
    let routines: Vec<_> = (0..rounds).map(|_| fresh_copy_routine()).collect();
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let routines = &routines;
            let barrier = &barrier;
            s.spawn(move || {
                // SAFETY: a valid configuration image.
                unsafe { _tile_loadconfig(CONFIG_16X64.as_ptr()) };
                let mut out = vec![0u8; 1024];
                for (r, f) in routines.iter().enumerate() {
                    barrier.wait();
                    for c in 0..calls {
                        let data = bytes(u64::from(t) * 1_000_000 + (r * calls + c) as u64, 1024);
                        f(data.as_ptr(), 64, out.as_mut_ptr());
                        assert_eq!(out, data, "thread {t} round {r} call {c}");
                    }
                }
                // SAFETY: releases this thread's configuration.
                unsafe { _tile_release() };
            });
        }
    });
    if trap::patching() {
        assert!(
            trap::patched_sites() >= rounds,
            "{} sites patched",
            trap::patched_sites()
        );
    }
}

#[test]
fn fork_inherits_patched_sites() {
    if !trap_engine() {
        return;
    }
    // Its own data: the sites are the test's, run hot before the fork.
    let data = bytes(11, 1024);
    let mut out = vec![0u8; 1024];
    // SAFETY: a valid configuration image.
    unsafe { _tile_loadconfig(CONFIG_16X64.as_ptr()) };
    for _ in 0..4 {
        load_site(data.as_ptr() as usize, 64);
        store_site(out.as_mut_ptr() as usize, 64);
    }
    assert_eq!(out, data);
    out.fill(0);
    let again = bytes(12, 1024);
    // SAFETY: the child only runs the two patched sites on memory it owns, compares and
    // leaves with _exit; no allocation, no lock.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        load_site(again.as_ptr() as usize, 64);
        store_site(out.as_mut_ptr() as usize, 64);
        // SAFETY: ends the child without running the parent's destructors or test harness.
        unsafe { libc::_exit(i32::from(out != again)) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the child's patched sites gave wrong data"
    );
    // SAFETY: releases this thread's configuration.
    unsafe { _tile_release() };
}

#[test]
#[ignore = "run by a_thread_blocking_sigtrap_stops_patching in a child process"]
fn child_sigtrap_blocked() {
    if !in_child() {
        return;
    }
    trap::install().unwrap();
    amx_runtime::permit::request_permission().unwrap();
    let before = trap::patching();
    std::thread::spawn(|| {
        // SAFETY: a mask of SIGTRAP alone, blocked on this thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTRAP);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        let a = bytes(1, 1024);
        let b = bytes(2, 1024);
        assert_eq!(round_on_engine(&a, &b), round_on_emulator(&a, &b));
    })
    .join()
    .unwrap();
    println!("patching before {before} after {}", trap::patching());
}

/// A thread of a program that installed the engine itself runs AMX code with SIGTRAP blocked
/// (against the README's rule): the site another thread patches passes through an int3, whose
/// SIGTRAP would end that thread. Its first trapped instruction turns patching off instead.
#[test]
fn a_thread_blocking_sigtrap_stops_patching() {
    if !trap_engine() {
        return;
    }
    let run = Child::new("child_sigtrap_blocked").run();
    run.assert_passed();
    if run.stdout.contains("patching before false") {
        println!("patching unavailable here");
        return;
    }
    assert!(
        run.stdout.contains("patching before true after false"),
        "{}",
        run.stdout
    );
}
