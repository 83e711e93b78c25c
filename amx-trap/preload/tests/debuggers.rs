//! What debugging tools see of the engine (`tests/c/debugger.c`). A stack walk from the
//! engine's code goes on into the program's, as the unwind information of the engine's entry,
//! of a patched site's fast path and of its restorers describes them: gdb stops first where
//! the engine's copy of a faulting operand faults, and `bt` there must show the function that
//! ran the AMX instruction and its callers, which is what it shows on the silicon, stopped at
//! the instruction (a sampling profiler walks the same information). Under valgrind, which
//! runs no AMX on the silicon either, the library stays out of the way.
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

mod support;
use support::*;

/// gdb's `bt` at the first SIGSEGV of `debugger.c` in `mode`: under the library where the
/// engine runs AMX, on its own where the CPU does. `None` after a visible skip without gdb.
fn backtrace(mode: &str) -> Option<String> {
    let prog = build("debugger.c", &[])?;
    let mut gdb = std::process::Command::new("gdb");
    gdb.args(["-batch", "-nx"]);
    if !native_amx() {
        gdb.arg("-ex").arg(format!(
            "set environment LD_PRELOAD {}",
            library().display()
        ));
    }
    gdb.args(["-ex", "handle SIGILL nostop noprint pass"])
        .args(["-ex", "run", "-ex", "bt", "-ex", "kill", "--args"])
        .arg(&prog)
        .arg(mode)
        .env_remove("LD_PRELOAD");
    let out = match gdb.output() {
        Ok(out) => out,
        Err(e) => {
            skip(Kind::NotApplicable, format!("no gdb: {e}"));
            return None;
        }
    };
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `bt` walks from where gdb stopped through the function that ran the instruction,
/// its caller and `main`, in that order.
fn reaches_the_program(bt: &str) -> bool {
    let frames: Vec<&str> = bt.lines().filter(|l| l.starts_with('#')).collect();
    let at = |name: &str| {
        frames
            .iter()
            .position(|l| l.contains(&format!(" {name} (")))
    };
    match (at("amx_victim"), at("amx_caller"), at("main")) {
        (Some(v), Some(c), Some(m)) => v < c && c < m,
        _ => false,
    }
}

#[test]
fn a_backtrace_from_a_trapped_instruction_reaches_the_program() {
    let Some(bt) = backtrace("trapped") else {
        return;
    };
    assert!(bt.contains("Program received signal SIGSEGV"), "{bt}");
    assert!(reaches_the_program(&bt), "{bt}");
}

/// At a patched site the engine runs on the program's stack, below the site's frame; its walk
/// reads the site from the stub.
#[test]
fn a_backtrace_from_a_patched_site_reaches_the_program() {
    let Some(bt) = backtrace("patched") else {
        return;
    };
    assert!(bt.contains("Program received signal SIGSEGV"), "{bt}");
    if !native_amx() {
        assert!(bt.contains("fastpath::fast"), "not at a patched site: {bt}");
    }
    assert!(reaches_the_program(&bt), "{bt}");
}

/// Under valgrind (which checks every signal frame a handler returns through, and ended the
/// process at the first frame the engine built) the library does not install: a program's
/// handlers run as under valgrind alone.
#[test]
fn a_program_under_valgrind_runs_as_without_the_library() {
    let Some(prog) = build("debugger.c", &[]) else {
        return;
    };
    let run = |preload: bool| {
        let mut vg = std::process::Command::new("valgrind");
        vg.arg("-q").arg(&prog).arg("signals");
        vg.env_remove("LD_PRELOAD");
        if preload {
            vg.env("LD_PRELOAD", library());
        }
        vg.output()
    };
    let alone = match run(false) {
        Ok(out) => out,
        Err(e) => {
            skip(Kind::NotApplicable, format!("no valgrind: {e}"));
            return;
        }
    };
    let preloaded = run(true).expect("valgrind ran once");
    let text = |o: &std::process::Output| {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    assert!(alone.status.success(), "{}", text(&alone));
    assert_eq!(
        String::from_utf8_lossy(&alone.stdout),
        "handled 3 SIGUSR1, left the SIGSEGV handler with 11\n"
    );
    assert_eq!(
        (preloaded.status.code(), &preloaded.stdout),
        (alone.status.code(), &alone.stdout),
        "{}",
        text(&preloaded)
    );
}
