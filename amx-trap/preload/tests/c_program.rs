//! An unmodified C program built with `gcc -O2 -mamx-tile -mamx-int8 -mamx-bf16` and the
//! `<immintrin.h>` intrinsics (`tests/c/amx_program.c`), run under `LD_PRELOAD` of the
//! library: its results must equal the emulator's bit for bit, its own SIGSEGV and SIGILL
//! handlers must see what Linux reports on the silicon (and leave with `siglongjmp`), and
//! without handlers it must die of the same signal. Skipped, with the reason shown, where gcc
//! lacks the AMX flags.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::PathBuf;

use amx_runtime::{Emulator, TileUnit};

mod support;
use support::*;

/// The C program, built with gcc's AMX flags; `None` after a visible skip.
fn program() -> Option<PathBuf> {
    build(
        "amx_program.c",
        &["-O2", "-mamx-tile", "-mamx-int8", "-mamx-bf16"],
    )
}

/// The program in `mode` under the library, with CPUID faulting asked for (where the kernel
/// offers it, `cpuid` then reports the modelled CPU).
fn run(program: &std::path::Path, mode: &str) -> Run {
    Program::preloaded(program, &[mode])
        .env("AMX_TRAP_CPUID", "1")
        .run()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether the kernel lets a process make `cpuid` fault (tried in a child, which exits at once).
fn cpuid_faulting_available() -> bool {
    // SAFETY: the child makes one system call and _exits.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let rc = libc::syscall(libc::SYS_arch_prctl, 0x1012, 0);
            libc::_exit(i32::from(rc != 0));
        }
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

#[test]
fn c_program_results_and_handlers() {
    let Some(program) = program() else { return };
    let out = run(&program, "run");
    assert!(out.ok(), "{out}");

    if native_amx() || cpuid_faulting_available() {
        assert_eq!(out.line("cpuid7"), "tile=1 int8=1 bf16=1", "{out}");
        assert_eq!(out.line("palette1"), "04002000 00080040 00000010", "{out}");
    } else {
        skip(
            Kind::NotApplicable,
            format!(
                "its cpuid part: CPUID faulting is not offered here, so cpuid reports the host \
                 ({})",
                out.line("cpuid7")
            ),
        );
    }
    assert_eq!(out.line("perm before"), "0", "{out}");
    assert_eq!(out.line("perm request"), "0 after 1", "{out}");

    // The same instructions on the emulator.
    let a: Vec<u8> = (0..1024u32).map(|i| (i * 37 + 11) as u8).collect();
    let b: Vec<u8> = (0..1024u32).map(|i| (i * 101 + 3) as u8).collect();
    let cfg = amx_test_support::TileImage::palette(1)
        .all_tiles(16, 64)
        .bytes();
    let mut emu = Emulator::new();
    emu.ldtilecfg(&cfg).unwrap();
    emu.tileloadd(1, &a, 64).unwrap();
    emu.tileloaddt1(2, &b, 64).unwrap();
    type Dot = fn(&mut Emulator, u8, u8, u8) -> Result<(), amx_runtime::Fault>;
    let dots: [(&str, u8, Dot); 5] = [
        ("ssd", 0, |e, c, a, b| e.tdpbssd(c, a, b)),
        ("sud", 0, |e, c, a, b| e.tdpbsud(c, a, b)),
        ("usd", 0, |e, c, a, b| e.tdpbusd(c, a, b)),
        ("uud", 0, |e, c, a, b| e.tdpbuud(c, a, b)),
        ("bf16", 3, |e, c, a, b| e.tdpbf16ps(c, a, b)),
    ];
    for (name, c, dot) in dots {
        emu.tilezero(c).unwrap();
        dot(&mut emu, c, 1, 2).unwrap();
        let mut tile = [0u8; 1024];
        emu.tilestored(c, &mut tile, 64).unwrap();
        assert_eq!(
            out.line(name),
            hex(&tile),
            "{name} differs from the emulator"
        );
    }
    assert_eq!(out.line("config kept"), "1", "{out}");
    assert_eq!(
        out.line("handler saw init"),
        "1, state restored 1",
        "a handler using AMX: {out}"
    );
    assert_eq!(
        out.line("sigset handler saw init"),
        "1, state restored 1",
        "a handler installed with sigset: {out}"
    );

    // docs/semantics.md section 1, read by the program's own handlers.
    assert_eq!(
        out.line("gp"),
        "sig=11 code=128 trapno=13 addr=(nil)",
        "{out}"
    );
    // The handler ran with the INIT tile state and siglongjmp does not restore the frame's:
    // the configuration is gone afterwards, as on the silicon.
    assert_eq!(out.line("config after gp kept"), "0", "{out}");
    assert_eq!(out.line("ud"), "sig=4 code=2 trapno=6", "{out}");
    assert_eq!(out.line("ud2"), "sig=4 code=2 trapno=6", "{out}");
}

#[test]
fn c_program_without_the_permission_gets_xfd() {
    let Some(program) = program() else { return };
    let out = run(&program, "xfd");
    assert!(out.ok(), "{out}");
    // XFD's #NM as Linux reports it: SIGILL, ILL_ILLOPC, REG_TRAPNO 0.
    assert_eq!(out.line("xfd"), "sig=4 code=1 trapno=0", "{out}");
}

#[test]
fn c_program_without_handlers_dies_of_the_signal() {
    let Some(program) = program() else { return };
    for (mode, signal) in [("die-gp", libc::SIGSEGV), ("die-ud", libc::SIGILL)] {
        let out = run(&program, mode);
        assert_eq!(out.signal(), Some(signal), "{mode}: {out}");
        assert!(!out.stdout.contains("survived"), "{mode}: {out}");
    }
}
