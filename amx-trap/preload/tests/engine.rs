//! No engine path changes `errno`, allocates, or waits for a lock a signal may hold
//! (`tests/c/engine.c`): `errno` is the program's after trapped instructions, patched sites
//! and repaired faults; the program's own allocator is never called from inside an AMX
//! instruction; a timer's handler running AMX instructions interrupts the allocator freely.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::time::Duration;

mod support;
use support::*;

fn program() -> Option<std::path::PathBuf> {
    if !engine_runs_amx() {
        return None;
    }
    build("engine.c", &[])
}

#[test]
fn errno_is_the_programs() {
    let Some(prog) = program() else { return };
    let run = Program::preloaded(&prog, &["errno"]).run();
    assert!(run.ok(), "{run}");
    for what in [
        "trapped:",
        "hot site:",
        "fault repaired at the hot site:",
        "fault repaired at a cold site:",
    ] {
        assert_eq!(run.line(what), "errno 1234", "{run}");
    }
}

#[test]
fn the_engine_never_calls_the_allocator() {
    let Some(prog) = program() else { return };
    let run = Program::preloaded(&prog, &["malloc"]).run();
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("allocations inside instructions:"), "0", "{run}");
}

#[test]
fn handlers_with_amx_interrupt_the_allocator() {
    let Some(prog) = program() else { return };
    let run = Program::preloaded(&prog, &["interrupt"])
        .limit(Duration::from_secs_f64(60.0 * slowness()))
        .run();
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("allocator and timer:"), "done, ticked", "{run}");
}
