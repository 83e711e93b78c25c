//! Contexts (`getcontext`, `setcontext`, `swapcontext`, `makecontext`), in which the C library
//! changes the mask with its own system call (`tests/c/ucontext.c`). Without AMX instructions:
//! every line the same as without the library (promises 1 and 2); with them, what the silicon
//! prints.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::time::Duration;

mod support;
use support::*;

fn same_as_without(mode: &str) {
    let Some(prog) = build("ucontext.c", &[]) else {
        return;
    };
    let limit = Duration::from_secs_f64(20.0 * slowness());
    let native = Program::native(&prog, &[mode]).limit(limit).run();
    assert!(native.ok(), "{mode} without the library: {native}");
    for patch in ["1", "0"] {
        let preloaded = Program::preloaded(&prog, &[mode])
            .env("AMX_TRAP_PATCH", patch)
            .limit(limit)
            .run();
        assert_eq!(
            (preloaded.status, &preloaded.stdout),
            (native.status, &native.stdout),
            "{mode}, AMX_TRAP_PATCH={patch}, under the library differs:\n{preloaded}\n\
             without it:\n{native}"
        );
    }
}

/// A fault handler that leaves with `setcontext` (as green-thread libraries recover) restores
/// the saved context's mask: the next fault is handled again. Under the library the thread
/// kept SIGSEGV blocked, and the second fault ended the process.
#[test]
fn a_handler_left_with_setcontext_gets_the_contexts_mask() {
    same_as_without("fault");
}

/// A context saved with SIGSEGV blocked blocks it again when entered.
#[test]
fn a_saved_context_keeps_its_mask() {
    same_as_without("saved");
}

/// A coroutine made with a full mask sees SIGSEGV blocked, and its return through `uc_link`
/// brings back the mask `swapcontext` saved, so a later fault is handled.
#[test]
fn a_coroutines_return_through_uc_link_brings_its_mask_back() {
    same_as_without("link");
}

/// A coroutine given arguments on its stack returns through `uc_link` too, and the caller's
/// callee-saved registers survive the round trip.
#[test]
fn a_coroutine_with_stack_arguments_returns_through_uc_link() {
    same_as_without("args");
}

/// A coroutine whose mask blocks everything runs AMX instructions, as on the silicon (AMX
/// needs no signal there): under the library `swapcontext` blocked SIGILL in the kernel and
/// the first AMX instruction ended the process.
#[test]
fn a_coroutine_with_every_signal_blocked_runs_amx() {
    let Some(prog) = build("ucontext.c", &[]) else {
        return;
    };
    for patch in ["1", "0"] {
        let run = if native_amx() {
            Program::native(&prog, &["amx"]).run()
        } else {
            Program::preloaded(&prog, &["amx"])
                .env("AMX_TRAP_PATCH", patch)
                .run()
        };
        assert!(run.ok(), "AMX_TRAP_PATCH={patch}: {run}");
        for round in 1..=3 {
            assert_eq!(
                run.line(&format!("coroutine round {round}:")),
                "SIGSEGV blocked 1, tile ok",
                "{run}"
            );
            assert_eq!(
                run.line(&format!("main round {round}:")),
                "SIGSEGV blocked 0",
                "{run}"
            );
        }
    }
}
