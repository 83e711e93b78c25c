//! The next AMX generations from a C program (`tests/c/next_gen.c`, the new instructions emitted
//! as bytes) under `LD_PRELOAD` with `AMX_TRAP_CPU=dmr`: the FP8 and complex products and the
//! MOVRS loads give the emulator's results, a MOVRS load from an unmapped row reaches the
//! program's SIGSEGV handler as TILELOADD's would, and TILEMOVROW writes zmm22 where the host
//! has AVX-512, else is #UD; a product inside a signal handler starts from the INIT state and
//! leaves the interrupted tiles as they were. On AMX silicon without these instructions the
//! engine assists it (the silicon runs the rest); skipped where the silicon has them all, or gcc
//! is missing.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::PathBuf;

use amx_runtime::{Emulator, TileUnit};

mod support;
use support::*;

fn program() -> Option<PathBuf> {
    build("next_gen.c", &["-O2", "-pthread"])
}

/// Whether the preloaded engine runs Diamond Rapids' new instructions here: it emulates them on
/// a CPU without AMX and assists AMX silicon that lacks them. Elsewhere a visible skip.
fn engine_runs_dmr() -> bool {
    if !native_amx() || engine::runs_here(engine::Model::DiamondRapids) {
        return true;
    }
    skip(
        Kind::NotApplicable,
        "this AMX silicon executes Diamond Rapids' instructions itself",
    );
    false
}

fn run(program: &std::path::Path, mode: &str) -> Run {
    run_args(program, &[mode])
}

fn run_args(program: &std::path::Path, args: &[&str]) -> Run {
    Program::preloaded(program, args)
        // On AMX silicon the engine assists it (not `AMX_TRAP_FORCE`'s signal handling alone).
        .env("AMX_TRAP_FORCE", "0")
        .env("AMX_TRAP_CPU", "dmr")
        .env("AMX_TRAP_CPUID", "1")
        .run()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn inputs() -> (Vec<u8>, Vec<u8>) {
    let a = (0..1024u32).map(|i| (i * 37 + 11) as u8).collect();
    let b = (0..1024u32).map(|i| (i * 101 + 3) as u8).collect();
    (a, b)
}

fn configured() -> Emulator {
    let cfg = amx_test_support::TileImage::palette(1)
        .all_tiles(16, 64)
        .bytes();
    let mut emu = Emulator::new();
    emu.ldtilecfg(&cfg).unwrap();
    emu
}

/// Whether the host reports AVX512F with its state enabled (what the engine needs for
/// AMX-AVX512).
fn host_zmm() -> bool {
    let caps = amx_runtime::detect();
    #[allow(unused_unsafe)]
    // SAFETY: CPUID exists on every x86-64 CPU.
    let leaf7 = unsafe { core::arch::x86_64::__cpuid_count(7, 0) };
    leaf7.ebx & (1 << 16) != 0 && caps.zmm_enabled()
}

#[test]
fn c_program_next_generation_results() {
    if !engine_runs_dmr() {
        return;
    }
    let Some(program) = program() else { return };
    let out = run(&program, "run");
    assert!(out.ok(), "{out}");
    let (a, b) = inputs();
    type Product = fn(&mut Emulator) -> Result<(), amx_runtime::Fault>;
    let products: [(&str, Product); 6] = [
        ("tdpbf8ps", |e| e.tdpbf8ps(2, 0, 1)),
        ("tdpbhf8ps", |e| e.tdpbhf8ps(2, 0, 1)),
        ("tdphbf8ps", |e| e.tdphbf8ps(2, 0, 1)),
        ("tdphf8ps", |e| e.tdphf8ps(2, 0, 1)),
        ("tcmmimfp16ps", |e| e.tcmmimfp16ps(2, 0, 1)),
        ("tcmmrlfp16ps", |e| e.tcmmrlfp16ps(2, 0, 1)),
    ];
    for (name, product) in products {
        let mut emu = configured();
        emu.tilezero(2).unwrap();
        emu.tileloadd(0, &a, 64).unwrap();
        emu.tileloadd(1, &b, 64).unwrap();
        product(&mut emu).unwrap();
        assert_eq!(
            out.line(name),
            hex(&emu.tile_data(2).unwrap()),
            "{name}: {out}"
        );
    }
    let mut emu = configured();
    emu.tileloaddrs(0, &a[5..], 32).unwrap();
    emu.tileloaddrst1(1, &b[7..], 48).unwrap();
    assert_eq!(
        out.line("tileloaddrs"),
        hex(&emu.tile_data(0).unwrap()),
        "{out}"
    );
    assert_eq!(
        out.line("tileloaddrst1"),
        hex(&emu.tile_data(1).unwrap()),
        "{out}"
    );
    // CPUID is the modelled CPU's only where the kernel offers CPUID faulting.
    let leaf = out.line("cpuid1e1");
    let want = if host_zmm() { "0000019f" } else { "0000011f" };
    if leaf != want {
        skip(
            Kind::NotApplicable,
            format!("its cpuid part: CPUID reports the host here (leaf 0x1E.1 EAX {leaf})"),
        );
    }
}

#[test]
fn c_program_movrs_fault_reaches_its_handler() {
    if !engine_runs_dmr() {
        return;
    }
    let Some(program) = program() else { return };
    let out = run(&program, "movrs-fault");
    assert!(out.ok(), "{out}");
    // SIGSEGV, SEGV_MAPERR, #PF, at the unmapped row (the second page's first byte).
    assert_eq!(
        out.line("fault"),
        "sig=11 code=1 trapno=14 offset=4096",
        "{out}"
    );
}

#[test]
fn c_program_row_move_writes_zmm_or_is_refused() {
    if !engine_runs_dmr() {
        return;
    }
    let Some(program) = program() else { return };
    let out = run(&program, "rowmove");
    assert!(out.ok(), "{out}");
    if host_zmm() {
        let (a, _) = inputs();
        let mut emu = configured();
        emu.tileloadd(0, &a, 64).unwrap();
        let row = emu.tilemovrow(0, 5).unwrap();
        assert_eq!(out.line("rowmove"), hex(&row), "{out}");
    } else {
        // No AVX-512 state: #UD, SIGILL with ILL_ILLOPN and REG_TRAPNO 6.
        assert_eq!(out.line("rowmove"), "sig=4 code=2 trapno=6", "{out}");
    }
}

#[test]
fn c_program_first_use_in_a_thread_on_a_small_alternate_stack() {
    if !engine_runs_dmr() {
        return;
    }
    let Some(program) = program() else { return };
    // The engine's first signal of a thread arrives on the thread's alternate stack, 1 KiB
    // larger than the kernel's smallest here: with the tile state in the kernel's frame, the
    // engine must claim the thread's state in what is left. Once with the MOVRS loads as the
    // thread's first tile-data instructions (assisting silicon, the engine first enables the
    // thread's tile data), once after a TILEZERO.
    let out = run_args(&program, &["thread", "1024"]);
    assert!(out.ok(), "{out}");
    let (a, b) = inputs();
    let mut emu = configured();
    emu.tileloaddrs(0, &a, 64).unwrap();
    emu.tileloaddrst1(1, &b, 64).unwrap();
    emu.tilezero(2).unwrap();
    emu.tdpbf8ps(2, 0, 1).unwrap();
    let want = hex(&emu.tile_data(2).unwrap());
    assert_eq!(out.line("thread"), want, "{out}");
    assert_eq!(out.line("thread-zero-first"), want, "{out}");
}

#[test]
fn c_program_product_in_a_signal_handler() {
    if !engine_runs_dmr() {
        return;
    }
    let Some(program) = program() else { return };
    // The handler starts in the INIT tile state, runs its own TDPBF8PS, and the interrupted
    // code's configuration and tile come back when it returns, as on silicon with AMX-FP8.
    let out = run(&program, "handler");
    assert!(out.ok(), "{out}");
    let (a, b) = inputs();
    let mut emu = configured();
    emu.tileloadd(0, &a, 64).unwrap();
    emu.tileloadd(1, &b, 64).unwrap();
    emu.tilezero(2).unwrap();
    emu.tdpbf8ps(2, 0, 1).unwrap();
    assert_eq!(
        out.line("handler"),
        hex(&emu.tile_data(2).unwrap()),
        "{out}"
    );
    assert_eq!(out.line("handler-started-init"), "1", "{out}");
    assert_eq!(out.line("interrupted-state-back"), "1 1", "{out}");
}

#[test]
fn c_program_refused_tile_state_is_the_programs_sigsegv() {
    // Only an engine assisting AMX silicon asks Linux for a thread's tile state; emulating, it
    // keeps the tiles itself.
    if !native_amx() {
        skip(
            Kind::NotApplicable,
            "the engine asks Linux for a thread's tile state only when it assists AMX silicon",
        );
        return;
    }
    if !engine_runs_dmr() {
        return;
    }
    let Some(program) = program() else { return };
    // Linux out of memory for the thread's tile state at its first tile data (simulated by the
    // engine: the kernel's own SIGSEGV, queued where it would arise): the program's SIGSEGV
    // handler sees what the silicon's first use would give it, SI_KERNEL (128) without an
    // address, at the instruction, and the process lives on.
    let out = Program::preloaded(&program, &["refused"])
        .env("AMX_TRAP_FORCE", "0")
        .env("AMX_TRAP_CPU", "dmr")
        .env("AMX_TRAP_TEST_REFUSE_TILE_STATE", "1")
        .run();
    assert!(out.ok(), "{out}");
    assert_eq!(
        out.line("refused"),
        "sig=11 code=128 trapno=0 addr=(nil) at-instruction=1",
        "{out}"
    );
}
