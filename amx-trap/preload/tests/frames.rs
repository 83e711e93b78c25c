//! Tile state follows the signal frames the engine builds (`tests/c/frames.c`,
//! `tests/c/exceptions.cc`): a handler starts with the INIT state, returning brings the
//! interrupted state back, a handler left by `siglongjmp` or by a C++ exception keeps the state
//! it made; at any depth, on any stack. On a CPU with AMX the engine builds the frames and the
//! silicon's state goes through them (`AMX_TRAP_FORCE=1`), and the program's output must be the
//! same as without the library; without AMX the engine's own state does.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

/// Runs `args` under the library, and where the silicon runs AMX also without it: both must
/// print `expected`.
fn check(prog: &std::path::Path, args: &[&str], expected: &[&str]) {
    let mut runs = vec![("under the library", Program::preloaded(prog, args).run())];
    if native_amx() {
        runs.push(("on the silicon alone", Program::native(prog, args).run()));
    }
    for (how, run) in runs {
        assert!(run.ok(), "{args:?} {how}: {run}");
        let lines: Vec<&str> = run.stdout.lines().collect();
        assert_eq!(lines, expected, "{args:?} {how}: {run}");
    }
}

#[test]
fn nested_handlers_each_get_init_and_give_the_state_back() {
    let Some(prog) = build("frames.c", &[]) else {
        return;
    };
    check(
        &prog,
        &["nested"],
        &[
            "depth 1: init 1 kept 1",
            "depth 2: init 1 kept 1",
            "depth 3: init 1 kept 1",
            "interrupted state back: 1",
        ],
    );
}

#[test]
fn handlers_left_by_siglongjmp_keep_their_state() {
    let Some(prog) = build("frames.c", &[]) else {
        return;
    };
    check(
        &prog,
        &["abandon"],
        &[
            "abandoned 0: the handler's state 1",
            "abandoned 1: the handler's state 1",
            "abandoned 2: the handler's state 1",
            "abandoned 3: the handler's state 1",
            "abandoned 4: the handler's state 1",
            "then a return: init 1, state back 1",
        ],
    );
}

#[test]
fn an_alternate_stack_above_the_interrupted_frame() {
    let Some(prog) = build("frames.c", &[]) else {
        return;
    };
    check(
        &prog,
        &["altstack"],
        &[
            "altstack: on it 1 1, init 1 1, kept 1, interrupted state back 1",
            "altstack left by siglongjmp at depth 2: the handler's state 1",
        ],
    );
}

/// A handler that changes its frame's FP state: `rt_sigreturn` restores what it can and resets
/// the rest, the tiles among it (`fpu__restore_sig`): with `fpregs` NULL, with MAGIC1
/// overwritten (the legacy state alone), and with FP state it cannot read (SIGSEGV, and the
/// user state reset).
#[test]
fn a_frame_whose_fp_state_a_handler_changed_returns_to_init() {
    let Some(prog) = build("frames.c", &[]) else {
        return;
    };
    for patch in ["1", "0"] {
        let run = Program::preloaded(&prog, &["changed"])
            .env("AMX_TRAP_PATCH", patch)
            .run();
        assert!(run.ok(), "AMX_TRAP_PATCH={patch}: {run}");
        let lines: Vec<&str> = run.stdout.lines().collect();
        assert_eq!(
            lines,
            [
                "fpregs NULL: SIGSEGV 0, INIT after 1",
                "MAGIC1 overwritten: SIGSEGV 0, INIT after 1",
                "fpregs unreadable: SIGSEGV 1, INIT after 1",
            ],
            "AMX_TRAP_PATCH={patch}: {run}"
        );
    }
}

/// Signals that come together (three 150 us timers over a loop of tile loads) are entered one
/// on top of the other at one boundary, as the kernel stacks their frames: each handler still
/// starts from INIT, whatever the handler entered just before it left in the tiles. The
/// contexts they interrupt are between two instructions, as the silicon's: RF clear, and no
/// trap number (the #UD the engine consumes is not the program's).
#[test]
fn handlers_entered_one_on_top_of_another_each_start_from_init() {
    if !engine_runs_amx() {
        return;
    }
    let Some(prog) = build("frames.c", &[]) else {
        return;
    };
    for patch in ["1", "0"] {
        let run = Program::preloaded(&prog, &["stacked", "1"])
            .env("AMX_TRAP_PATCH", patch)
            .run();
        assert!(run.ok(), "AMX_TRAP_PATCH={patch}: {run}");
        assert_eq!(
            run.line("timers that ran:"),
            "3, handlers entered without INIT: 0, loop results wrong: 0",
            "AMX_TRAP_PATCH={patch}: {run}"
        );
        assert_eq!(
            run.line("interrupted contexts with RF or a trap number:"),
            "0",
            "AMX_TRAP_PATCH={patch}: {run}"
        );
    }
}

/// The same on a thread for which the engine can map no state (the address space used up, no
/// reserve): the handler runs on a frame as the kernel's, which the exception leaves through
/// (before, the engine called such a handler from its own frames, and the exception ended the
/// process there). Without an alternate stack, with one the handler does not ask for (the
/// kernel enters the engine there, and the handler's frame goes on the thread's stack), and
/// with one it asks for.
#[test]
fn a_cxx_exception_thrown_from_a_handler_of_a_thread_without_memory() {
    let Some(prog) = build("exceptions.cc", &["-fnon-call-exceptions"]) else {
        return;
    };
    let native = Program::native(&prog, &["oom"]).run();
    assert!(native.ok(), "{native}");
    assert_eq!(
        native.stdout,
        "caught segv without memory, on the alternate stack 0\n".repeat(2)
            + "caught segv without memory, on the alternate stack 1\n",
        "{native}"
    );
    for reserve in ["0", "4"] {
        let run = Program::preloaded(&prog, &["oom"])
            .env("AMX_TRAP_RESERVE", reserve)
            .run();
        assert!(run.ok(), "reserve {reserve}: {run}");
        assert_eq!(run.stdout, native.stdout, "reserve {reserve}: {run}");
    }
}

/// The engine's signal paths call no function of another library (promise 5): with memory
/// routines of another library's preloaded first, as a sanitizer's runtime defines them,
/// nested handlers that each configure tiles and return (the engine saving and putting back
/// tile state at each) never call them.
#[test]
fn the_engine_calls_no_other_librarys_memory_routines() {
    if !engine_runs_amx() {
        return;
    }
    let (Some(prog), Some(routines)) = (
        build("frames.c", &[]),
        build("interpose.c", &["-shared", "-fPIC"]),
    ) else {
        return;
    };
    let both = format!("{}:{}", routines.display(), library().display());
    let run = Program::preloaded(&prog, &["nested"])
        .env("LD_PRELOAD", &both)
        .run();
    assert!(run.ok(), "{run}");
    assert_eq!(run.line("interrupted state back:"), "1", "{run}");
    assert!(run.stderr.contains("calls from the engine: 0\n"), "{run}");
}

#[test]
fn a_cxx_exception_thrown_from_a_handler() {
    let Some(prog) = build("exceptions.cc", &["-fnon-call-exceptions"]) else {
        return;
    };
    check(
        &prog,
        &[],
        &[
            "caught segv, rows 5",
            "caught ill, rows 5",
            "caught segv from depth 2, rows 5",
        ],
    );
}
