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
