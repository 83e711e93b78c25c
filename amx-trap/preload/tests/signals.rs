//! The program's signals under the preload (`tests/c/signals.c`): a program with no AMX
//! instruction sees exactly what it sees without the library; every way of installing a
//! handler or changing a mask reaches the engine; AMX works whatever the program blocked; new
//! processes and threads inherit the masks the program set.
//!
//! On a CPU with AMX the engine's signal handling runs too (`AMX_TRAP_FORCE=1`, the
//! instructions the silicon's), so these run everywhere; the parts that need the engine's AMX
//! run where the CPU lacks it.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

fn program() -> Option<std::path::PathBuf> {
    build("signals.c", &[])
}

/// Runs `args` with and without the library; the two must not differ.
fn same_as_without(prog: &std::path::Path, args: &[&str]) -> Run {
    let native = Program::native(prog, args).run();
    let preloaded = Program::preloaded(prog, args).run();
    assert!(!native.timed_out, "{args:?} without the library: {native}");
    assert_eq!(
        (preloaded.status, &preloaded.stdout),
        (native.status, &native.stdout),
        "{args:?} under the library differs:\n{preloaded}\nwithout it:\n{native}"
    );
    preloaded
}

#[test]
fn a_program_without_amx_behaves_as_without_the_library() {
    let Some(prog) = program() else { return };
    let run = same_as_without(&prog, &["plain"]);
    // The program's own checks ran to the end.
    assert_eq!(run.code(), Some(3), "{run}");
    assert!(run.stdout.contains("fork child status 7"), "{run}");
}

#[test]
fn sent_engine_signals_wait_while_the_program_blocks_them() {
    let Some(prog) = program() else { return };
    let run = same_as_without(&prog, &["pending"]);
    assert_eq!(run.line("blocked:"), "delivered 0 pending 1", "{run}");
    assert_eq!(run.line("unblocked:"), "delivered 1 pending 0", "{run}");
}

#[test]
fn new_processes_and_threads_inherit_the_programs_masks() {
    let Some(prog) = program() else { return };
    let run = same_as_without(&prog, &["inherit"]);
    // SIGILL, SIGSEGV, SIGUSR1 blocked by the parent; the thread with attributes of its own.
    assert_eq!(run.line("parent mask"), "0x608", "{run}");
    assert_eq!(run.line("fork child mask"), "0x608", "{run}");
    assert_eq!(run.line("clone child mask"), "0x608", "{run}");
    // posix_spawn, and the exec of the fork and clone children.
    assert_eq!(run.stdout.matches("spawned mask 0x608").count(), 3, "{run}");
    assert!(run.stdout.contains("thread mask 0x10"), "{run}");
}

#[test]
fn cpuid_runs_with_every_signal_blocked() {
    let Some(prog) = program() else { return };
    // With CPUID faulting asked for (where the kernel offers it) as without.
    for cpuid in ["0", "1"] {
        let run = Program::preloaded(&prog, &["cpuid-blocked"])
            .env("AMX_TRAP_CPUID", cpuid)
            .run();
        assert!(run.ok(), "AMX_TRAP_CPUID={cpuid}: {run}");
        assert_eq!(
            run.line("cpuid with everything blocked:"),
            "8 leaves",
            "{run}"
        );
    }
}

#[test]
fn amx_works_with_the_engines_signals_blocked() {
    let Some(prog) = program() else { return };
    if !engine_runs_amx() {
        return;
    }
    let run = Program::preloaded(&prog, &["amx-blocked"]).run();
    assert!(run.ok(), "{run}");
    for api in 0..4 {
        assert_eq!(
            run.line(&format!("api {api}:")),
            "ok, mask has them 1",
            "{run}"
        );
    }
}

#[test]
fn every_way_of_installing_a_handler_keeps_the_engine_first() {
    let Some(prog) = program() else { return };
    // `sysv` is `__sysv_signal`, which `signal` is in strict ISO C (`-std=c11`).
    for api in [
        "sigaction",
        "signal",
        "bsd_signal",
        "sigset",
        "sysv",
        "syscall",
    ] {
        let run = Program::preloaded(&prog, &["install", api]).run();
        assert!(run.ok(), "{api}: {run}");
        assert_eq!(
            run.line(&format!("install {api}:")),
            "amx ok, ud2 caught 1",
            "{run}"
        );
    }
}
