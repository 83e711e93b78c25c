//! Per-thread engine state (`tests/c/threads.c`): reused once a thread has ended, so that
//! 10 000 short-lived threads fit in the address space of a few; and a state that cannot be
//! mapped is reported on standard error, the thread ending with SIGSEGV as on Linux, never
//! with the #UD of an instruction that was never run.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

#[test]
fn ten_thousand_short_lived_threads_under_a_tight_limit() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("threads.c", &[]) else {
        return;
    };
    let run = Program::preloaded(&prog, &["many", "10000"]).run();
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("threads done:"), "10000 of 10000", "{run}");
}

#[test]
fn no_memory_for_a_threads_state_is_reported() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("threads.c", &[]) else {
        return;
    };
    let run = Program::preloaded(&prog, &["oom"]).run();
    assert_eq!(run.signal(), Some(libc::SIGSEGV), "{run}");
    assert!(
        run.stderr
            .contains("amx-trap: no memory for this thread's AMX state"),
        "{run}"
    );
}
